// The flat token prefix tree; see trie.h.
#include "engine/trie.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "engine/limits.h"

namespace lexguide {

namespace {
// The first 8 bytes of s, big-endian, zero-padded: comparing these keys orders strings as
// their bytes do, except between strings equal on those bytes (the tie-break compares them
// whole) -- most comparisons of a sort become one integer compare.
uint64_t prefix_key(std::string_view s) {
  uint64_t k = 0;
  size_t n = std::min<size_t>(8, s.size());
  for (size_t i = 0; i < n; i++) k |= uint64_t(uint8_t(s[i])) << (56 - 8 * i);
  return k;
}

std::vector<uint32_t> sorted_text_ids(const TokenBytes& token_bytes, const std::vector<bool>& is_text) {
  if (token_bytes.size() > kMaxVocab) throw std::invalid_argument("vocabulary too large");
  std::vector<std::pair<uint64_t, uint32_t>> keyed;
  for (uint32_t i = 0; i < token_bytes.size(); i++)
    if (is_text[i] && !token_bytes[i].empty()) {
      keyed.emplace_back(prefix_key(token_bytes[i]), i);
    }
  // bytes order, ties by id: the order a stable sort by bytes gives
  std::sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    int c = token_bytes[a.second].compare(token_bytes[b.second]);
    return c != 0 ? c < 0 : a.second < b.second;
  });
  std::vector<uint32_t> ids(keyed.size());
  for (size_t i = 0; i < keyed.size(); i++) ids[i] = keyed[i].second;
  return ids;
}
}  // namespace

TokenBytes::TokenBytes(std::string blob, std::vector<uint32_t> offsets)
    : blob_(std::move(blob)), offsets_(std::move(offsets)) {
  if (offsets_.empty() || offsets_[0] != 0 || offsets_.back() != blob_.size())
    throw std::invalid_argument("token offsets do not cover the bytes");
  if (offsets_.size() - 1 > kMaxVocab) throw std::invalid_argument("vocabulary too large");
  for (size_t i = 0; i + 1 < offsets_.size(); i++) {
    if (offsets_[i + 1] < offsets_[i]) throw std::invalid_argument("token offsets go down");
    uint32_t n = offsets_[i + 1] - offsets_[i];
    if (n > kMaxTokenBytes)
      throw std::invalid_argument("token " + std::to_string(i) + " is longer than " +
                                  std::to_string(kMaxTokenBytes) + " bytes");
    max_len_ = std::max(max_len_, n);
  }
}

TokenTrie::TokenTrie(const TokenBytes& token_bytes, const std::vector<bool>& is_text)
    : TokenTrie(token_bytes, sorted_text_ids(token_bytes, is_text)) {}

TokenTrie::TokenTrie(const TokenBytes& token_bytes, std::vector<uint32_t> ids) {
  // root
  byte_.push_back(0);
  depth_.push_back(0);
  std::vector<uint32_t> node_tokens_count(1, 0);
  std::vector<uint32_t> path{0};  // node at each depth of the current path
  std::string_view prev;
  bool first = true;
  std::vector<uint32_t> order;  // token ids in node order
  for (uint32_t id : ids) {
    std::string_view s = token_bytes[id];
    size_t common = 0;
    if (!first) {
      size_t lim = std::min(prev.size(), s.size());
      while (common < lim && prev[common] == s[common]) common++;
    }
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); d++) {
      uint32_t n = uint32_t(byte_.size());
      byte_.push_back(uint8_t(s[d]));
      depth_.push_back(uint16_t(d + 1));
      node_tokens_count.push_back(0);
      path.push_back(n);
    }
    node_tokens_count[path.back()]++;
    order.push_back(id);
    prev = s;
    first = false;
  }
  derive_sizes();  // depths of a built trie are a preorder; sets max_depth_
  uint32_t n_nodes = uint32_t(byte_.size());
  tok_lo_.assign(n_nodes + 1, 0);
  for (uint32_t n = 0; n < n_nodes; n++) tok_lo_[n + 1] = tok_lo_[n] + node_tokens_count[n];
  tok_ids_ = std::move(order);  // tokens come in node order (sorted bytes = DFS preorder)
}

bool TokenTrie::derive_sizes() {
  // Depths in preorder: the root alone at depth 0, each node at most one deeper than the node
  // before it. A node's subtree ends where the next node of depth <= its own starts: path[d]
  // is the open node at depth d, closed (its size set) by the first later node that is not
  // deeper. One pass, each node closed once. False when the depths are not a preorder.
  // A closed node's buckets (its own byte's and those below it) go into its parent's below_.
  uint32_t n_nodes = uint32_t(depth_.size());
  size_.assign(n_nodes, 1);
  below_.assign(n_nodes, 0);
  height_.assign(n_nodes, 0);
  plain_len_.assign(n_nodes, kNotPlain);
  if (n_nodes == 0 || depth_[0] != 0 || byte_.size() != n_nodes) return false;
  std::vector<uint32_t> path(size_t(kMaxTokenBytes) + 1);
  uint32_t* sz = size_.data();
  uint32_t* below = below_.data();
  uint16_t* height = height_.data();
  const uint16_t* dep = depth_.data();
  const uint8_t* byte = byte_.data();
  uint32_t cur = 0, max_depth = 0;
  path[0] = 0;
  auto close = [&](uint32_t k, uint32_t end) {  // the open node at depth k >= 1 ends at end
    uint32_t m = path[k];
    sz[m] = end - m;
    below[path[k - 1]] |= below[m] | bucket_bit(byte[m]);
    height[path[k - 1]] = std::max<uint16_t>(height[path[k - 1]], uint16_t(height[m] + 1));
  };
  for (uint32_t n = 1; n < n_nodes; n++) {
    uint32_t d = dep[n];
    if (d == 0 || d > cur + 1 || d > kMaxTokenBytes) return false;
    for (uint32_t k = cur; k >= d; k--) close(k, n);
    path[d] = n;
    cur = d;
    max_depth = std::max(max_depth, d);
  }
  for (uint32_t k = cur; k >= 1; k--) close(k, n_nodes);
  sz[0] = n_nodes;
  max_depth_ = uint16_t(max_depth);
  return true;
}

void TokenTrie::mark_plain(const std::vector<bool>& plain) {
  // a node's own tokens first (0: none), then, children before parents (preorder backwards),
  // each node into its parent: the longest, or kNotPlain once any token below is not plain
  const uint32_t n_nodes = this->n_nodes();
  for (uint32_t n = 0; n < n_nodes; n++) {
    uint16_t own = 0;
    for (const uint32_t* t = tokens_begin(n); t != tokens_end(n) && own != kNotPlain; ++t)
      own = *t < plain.size() && plain[*t] ? depth_[n] : kNotPlain;
    plain_len_[n] = own;
  }
  std::vector<uint32_t> parent(n_nodes, 0), path(size_t(max_depth_) + 1, 0);
  for (uint32_t n = 1; n < n_nodes; n++) {
    path[depth_[n]] = n;
    parent[n] = path[depth_[n] - 1u];
  }
  for (uint32_t n = n_nodes; n-- > 1;) {
    uint16_t& up = plain_len_[parent[n]];
    up = plain_len_[n] == kNotPlain || up == kNotPlain ? kNotPlain : std::max(up, plain_len_[n]);
  }
}

TokenTrie TokenTrie::from_arrays(std::vector<uint8_t> bytes, std::vector<uint16_t> depths,
                                 std::vector<uint32_t> token_lo, std::vector<uint32_t> token_ids,
                                 uint32_t n_tokens) {
  auto bad = [](const char* what) { throw std::invalid_argument(std::string("token trie: ") + what); };
  size_t n_nodes = bytes.size();
  if (n_nodes == 0 || n_nodes >= UINT32_MAX) bad("no root");
  if (depths.size() != n_nodes || token_lo.size() != n_nodes + 1) bad("array sizes differ");
  if (bytes[0] != 0) bad("the root has a byte");
  if (token_lo[0] != 0 || token_lo[n_nodes] != token_ids.size()) bad("token ranges do not cover the ids");
  uint32_t descents = 0;  // token ranges are monotone iff no step goes down
  for (size_t n = 0; n < n_nodes; n++) descents |= uint32_t(token_lo[n] > token_lo[n + 1]);
  if (descents) bad("token ranges are not monotone");
  uint32_t max_id = 0;
  for (uint32_t id : token_ids) max_id = std::max(max_id, id);
  if (!token_ids.empty() && max_id >= n_tokens) bad("a token id outside the vocabulary");
  TokenTrie t;
  t.byte_ = std::move(bytes);
  t.depth_ = std::move(depths);
  t.tok_lo_ = std::move(token_lo);
  t.tok_ids_ = std::move(token_ids);
  if (!t.derive_sizes()) bad("depths are not a preorder");
  return t;
}

bool TokenTrie::operator==(const TokenTrie& o) const {
  return byte_ == o.byte_ && depth_ == o.depth_ && size_ == o.size_ && tok_lo_ == o.tok_lo_ &&
         tok_ids_ == o.tok_ids_ && max_depth_ == o.max_depth_;
}

size_t TokenTrie::memory_bytes() const {
  return byte_.size() * (1 + 2 + 4 + 4 + 2 + 2 + 4) + tok_ids_.size() * 4;
}

}  // namespace lexguide
