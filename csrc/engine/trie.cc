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
uint64_t prefix_key(const std::string& s) {
  uint64_t k = 0;
  size_t n = std::min<size_t>(8, s.size());
  for (size_t i = 0; i < n; i++) k |= uint64_t(uint8_t(s[i])) << (56 - 8 * i);
  return k;
}

std::vector<uint32_t> sorted_text_ids(const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text) {
  if (token_bytes.size() > kMaxVocab) throw std::invalid_argument("vocabulary too large");
  std::vector<std::pair<uint64_t, uint32_t>> keyed;
  for (uint32_t i = 0; i < token_bytes.size(); i++)
    if (is_text[i] && !token_bytes[i].empty()) {
      if (token_bytes[i].size() > kMaxTokenBytes)
        throw std::invalid_argument("token " + std::to_string(i) + " is longer than " +
                                    std::to_string(kMaxTokenBytes) + " bytes");
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

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text)
    : TokenTrie(token_bytes, sorted_text_ids(token_bytes, is_text)) {}

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, std::vector<uint32_t> ids) {
  // root
  byte_.push_back(0);
  depth_.push_back(0);
  size_.push_back(1);
  std::vector<uint32_t> node_tokens_count(1, 0);
  std::vector<uint32_t> path{0};  // node at each depth of the current path
  const std::string* prev = nullptr;
  std::vector<uint32_t> order;  // token ids in node order
  for (uint32_t id : ids) {
    const std::string& s = token_bytes[id];
    size_t common = 0;
    if (prev) {
      size_t lim = std::min(prev->size(), s.size());
      while (common < lim && (*prev)[common] == s[common]) common++;
    }
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); d++) {
      uint32_t n = uint32_t(byte_.size());
      byte_.push_back(uint8_t(s[d]));
      depth_.push_back(uint16_t(d + 1));
      size_.push_back(1);
      node_tokens_count.push_back(0);
      path.push_back(n);
    }
    node_tokens_count[path.back()]++;
    order.push_back(id);
    max_depth_ = std::max<uint16_t>(max_depth_, uint16_t(s.size()));
    prev = &s;
  }
  // subtree sizes: a node's subtree ends where the next node of depth <= its own starts
  std::vector<uint32_t> stack;
  uint32_t n_nodes = uint32_t(byte_.size());
  for (uint32_t n = 0; n <= n_nodes; n++) {
    uint16_t d = n < n_nodes ? depth_[n] : 0;
    while (!stack.empty() && (n == n_nodes || depth_[stack.back()] >= d)) {
      size_[stack.back()] = n - stack.back();
      stack.pop_back();
    }
    if (n < n_nodes) stack.push_back(n);
  }
  tok_lo_.assign(n_nodes + 1, 0);
  for (uint32_t n = 0; n < n_nodes; n++) tok_lo_[n + 1] = tok_lo_[n] + node_tokens_count[n];
  tok_ids_ = std::move(order);  // tokens come in node order (sorted bytes = DFS preorder)
}

size_t TokenTrie::memory_bytes() const {
  return byte_.size() * (1 + 2 + 4 + 4) + tok_ids_.size() * 4;
}

}  // namespace lexguide
