// Hash-consed byte regexes and their derivatives; see regex.h.
#include "engine/regex.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

#include "engine/limits.h"

namespace lexguide {

namespace {

uint64_t mix(uint64_t h) {
  h ^= h >> 31;
  h *= 0x7FB5D329728EA185ull;
  h ^= h >> 27;
  h *= 0x81DADEF4BC2DD44Dull;
  return h ^ (h >> 33);
}

uint64_t hash_key(uint8_t kind, const uint32_t* a, uint32_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t(kind) + 1) ^ n;
  for (uint32_t i = 0; i < n; i++) h = (h ^ a[i]) * 0xFF51AFD7ED558CCDull + (h >> 29);
  return mix(h);
}

uint64_t hash_labels(const std::array<uint8_t, 256>& labels) {
  uint64_t h = 0x243F6A8885A308D3ull;
  for (int i = 0; i < 256; i += 8) {
    uint64_t w;
    std::memcpy(&w, labels.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull + (h >> 29);
  }
  return mix(h);
}


}  // namespace

RegexLimits& regex_limits() {
  static RegexLimits limits{{kMaxRegexNodes}, {kMaxRepeat}};
  return limits;
}

std::recursive_mutex& store_mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace {
uint32_t next_tag() {  // never 0, the tag of plain ids
  static std::atomic<uint32_t> last{0};  // relaxed: only uniqueness matters
  uint32_t t;
  do t = last.fetch_add(1, std::memory_order_relaxed) + 1;
  while (t == 0);
  return t;
}
}  // namespace

// A generation is replaced once it passes kRotateRegexNodes nodes (limits.h; checked between
// compiles, so one may take it somewhat past), so its per-node arrays are reserved and its
// hash-consing table sized for that many at once: reserved memory that is not written yet
// costs address space only, and no compile pays for copying the arrays or rehashing every
// node when they would double (a pause growing with the store, landing on whichever compile
// crosses the power of two). The table (4 MiB) is written once, here.
void RegexStore::reserve_generation(size_t n_nodes) {
  size_t n = std::max<size_t>(n_nodes, kRotateRegexNodes + kRotateRegexNodes / 4);
  nodes_.reserve(n);
  args_.reserve(3 * n);
  doff_.reserve(n);
  grow_cons(n);
}

RegexStore::RegexStore() : tag_(next_tag()) {
  reserve_generation(0);
  std::array<uint8_t, 256> zero{};
  trivial_part_ = intern_partition(zero);
  mk(K_NOTHING, nullptr, 0, false, trivial_part_);
  mk(K_EPS, nullptr, 0, true, trivial_part_);
  uint32_t a = NOTHING;
  mk(K_NOT, &a, 1, true, trivial_part_);
}

RegexStore::RegexStore(const RegexStore& from, size_t keep) : tag_(next_tag()) {
  keep = std::min(std::max<size_t>(keep, 3), from.nodes_.size());
  base_ = std::min(uint32_t(keep), from.base_);
  nodes_.assign(from.nodes_.begin(), from.nodes_.begin() + keep);
  // args are appended as nodes are made, so the first nodes' args are a prefix too
  size_t n_args = keep < from.nodes_.size() ? from.nodes_[keep].off : from.args_.size();
  args_.assign(from.args_.begin(), from.args_.begin() + n_args);
  // a node's partition is interned before the node: the kept nodes use a prefix of them
  uint32_t n_parts = 1;
  for (const Node& nd : nodes_) n_parts = std::max(n_parts, nd.part + 1);
  parts_.assign(from.parts_.begin(), from.parts_.begin() + n_parts);
  trivial_part_ = from.trivial_part_;
  reserve_generation(nodes_.size());
  grow_parts(parts_.size());
}

uint32_t RegexStore::fix_base() {
  if (base_ == UINT32_MAX) base_ = uint32_t(nodes_.size());
  return base_;
}

size_t RegexStore::memory_bytes() const {
  // an unordered_map entry: its node (next pointer, cached hash, value) plus a bucket slot
  auto map_bytes = [](size_t n, size_t value) { return n * map_entry_bytes(value); };
  // the per-node arrays by their size: their reserve (reserve_generation) is not written yet
  size_t b = nodes_.size() * sizeof(Node) + (args_.size() + doff_.size()) * sizeof(uint32_t);
  b += (cons_slots_.capacity() + part_slots_.capacity()) * sizeof(uint32_t);
  b += parts_.size() * (sizeof(Partition) + 16 + 34);  // its tables, ~16 representatives and their offsets
  b += dtable_.capacity() * sizeof(uint32_t);
  b += refine_memo_.memory_bytes() + map_bytes(nonempty_memo_.size(), 8);
  return b + alt_index_bytes_;
}

size_t RegexStore::find_node(uint8_t kind, const uint32_t* a, uint32_t n, uint64_t h) const {
  size_t mask = cons_slots_.size() - 1;
  for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
    uint32_t x = cons_slots_[i];
    if (x == kFree) return i;
    const Node& nd = nodes_[x];
    if (nd.kind == kind && nd.n == n && (n == 0 || std::memcmp(args_.data() + nd.off, a, 4 * size_t(n)) == 0))
      return i;
  }
}

uint64_t RegexStore::node_hash(NodeId x) const { return hash_key(nodes_[x].kind, args(x), nodes_[x].n); }

void RegexStore::grow_cons(size_t at_least) {
  size_t size = std::max<size_t>(1024, cons_slots_.size() * 2);
  while (size < 2 * (at_least + 1)) size *= 2;
  std::vector<uint32_t> slots(size, kFree);
  cons_slots_.swap(slots);
  size_t mask = cons_slots_.size() - 1;
  for (NodeId x = 0; x < nodes_.size(); x++) {
    size_t i = size_t(node_hash(x)) & mask;
    while (cons_slots_[i] != kFree) i = (i + 1) & mask;
    cons_slots_[i] = x;
  }
}

size_t RegexStore::find_partition(const std::array<uint8_t, 256>& labels, uint64_t h) const {
  size_t mask = part_slots_.size() - 1;
  for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
    uint32_t p = part_slots_[i];
    if (p == kFree || parts_[p].label == labels) return i;
  }
}

void RegexStore::grow_parts(size_t at_least) {
  size_t size = std::max<size_t>(256, part_slots_.size() * 2);
  while (size < 2 * (at_least + 1)) size *= 2;
  std::vector<uint32_t> slots(size, kFree);
  part_slots_.swap(slots);
  size_t mask = part_slots_.size() - 1;
  for (uint32_t p = 0; p < parts_.size(); p++) {
    size_t i = size_t(hash_labels(parts_[p].label)) & mask;
    while (part_slots_[i] != kFree) i = (i + 1) & mask;
    part_slots_[i] = p;
  }
}

uint32_t RegexStore::intern_partition(const std::array<uint8_t, 256>& labels) {
  if (2 * (parts_.size() + 1) > part_slots_.size()) grow_parts();
  uint64_t h = hash_labels(labels);
  size_t slot = find_partition(labels, h);
  if (part_slots_[slot] != kFree) return part_slots_[slot];
  Partition p;
  p.label = labels;
  int first[256];
  std::fill(first, first + 256, -1);
  for (int b = 0; b < 256; b++)
    if (first[labels[b]] < 0) {
      first[labels[b]] = b;
      p.reps.push_back(uint8_t(b));
    }
  for (int b = 0; b < 256; b++) p.rep[b] = uint8_t(first[labels[b]]);
  p.first.assign(p.reps.size() + 1, 0);
  for (int b = 0; b < 256; b++) p.first[labels[b] + 1]++;
  for (size_t l = 0; l < p.reps.size(); l++) p.first[l + 1] += p.first[l];
  std::vector<uint16_t> fill(p.first.begin(), p.first.end() - 1);
  for (int b = 0; b < 256; b++) p.members[fill[labels[b]]++] = uint8_t(b);
  uint32_t id = uint32_t(parts_.size());
  parts_.push_back(std::move(p));
  part_slots_[slot] = id;
  return id;
}

uint32_t RegexStore::refine(uint32_t p, uint32_t q) {
  if (p == q || q == trivial_part_) return p;
  if (p == trivial_part_) return q;
  if (p > q) std::swap(p, q);
  uint64_t key = (uint64_t(p) << 32) | q;
  if (const uint32_t* hit = refine_memo_.find(key)) return *hit;
  // the common refinement: bytes share a class when they share one in both, numbered by
  // first use (a class pair's label in a table of n_p * n_q <= 65,536 entries)
  const Partition &a = parts_[p], &b = parts_[q];
  const size_t nq = b.reps.size();
  refine_labels_.assign(a.reps.size() * nq, 0xFFFF);
  std::array<uint8_t, 256> labels;
  uint16_t n = 0;
  for (int c = 0; c < 256; c++) {
    uint16_t& l = refine_labels_[a.label[c] * nq + b.label[c]];
    if (l == 0xFFFF) l = n++;
    labels[c] = uint8_t(l);
  }
  uint32_t r = intern_partition(labels);
  refine_memo_.emplace(key, r);
  return r;
}

uint32_t RegexStore::partition_of_many(const std::vector<NodeId>& kids) {
  uint32_t p = trivial_part_;
  for (NodeId c : kids) p = refine(p, nodes_[c].part);
  return p;
}

NodeId RegexStore::mk(uint8_t kind, const uint32_t* a, uint32_t n, bool null, uint32_t part) {
  if (2 * (nodes_.size() + 1) > cons_slots_.size()) grow_cons();
  size_t slot = find_node(kind, a, n, hash_key(kind, a, n));
  if (cons_slots_[slot] != kFree) return cons_slots_[slot];
  const uint32_t max_nodes = regex_limits().max_nodes.load(std::memory_order_relaxed);
  if (nodes_.size() >= max_nodes)
    throw LimitError("max_rx_nodes", max_nodes,
                     "resource limit max_rx_nodes=" + std::to_string(max_nodes) +
                         " exceeded: the regex store is full (a regex or its automaton is too large)");
  Node node{kind, null, false, part, uint32_t(args_.size()), n, 1, ByteSet{}};
  switch (kind) {  // the product of nested counted repetitions' bounds, saturating
    case K_CONCAT:
    case K_ALT:
    case K_AND:
      for (uint32_t i = 0; i < n; i++) node.weight = std::max(node.weight, nodes_[a[i]].weight);
      break;
    case K_NOT:
    case K_STAR: node.weight = nodes_[a[0]].weight; break;
    case K_REPEAT: {
      uint64_t w = uint64_t(std::max(a[1], a[2] == kInf ? 0u : a[2])) * nodes_[a[0]].weight;
      node.weight = uint32_t(std::min<uint64_t>(w, 0xFFFFFFFFu));
      break;
    }
    default: break;
  }
  args_.insert(args_.end(), a, a + n);
  switch (kind) {
    case K_BYTES: std::memcpy(node.first.w.data(), a, 32); break;
    case K_CONCAT:
      node.first = nodes_[a[0]].null ? nodes_[a[0]].first | nodes_[a[1]].first : nodes_[a[0]].first;
      break;
    case K_ALT:
      for (uint32_t i = 0; i < n; i++) node.first = node.first | nodes_[a[i]].first;
      break;
    case K_AND:
      node.first = ByteSet::full();
      for (uint32_t i = 0; i < n; i++) node.first = node.first & nodes_[a[i]].first;
      break;
    case K_NOT: node.first = ByteSet::full(); break;
    case K_STAR:
    case K_REPEAT: node.first = nodes_[a[0]].first; break;
    default: break;
  }
  node.boolean = kind == K_AND || kind == K_NOT;
  if (kind != K_BYTES) {
    uint32_t nk = kind == K_REPEAT ? 1 : n;
    for (uint32_t i = 0; i < nk && !node.boolean; i++) node.boolean = nodes_[a[i]].boolean;
  }
  NodeId id = NodeId(nodes_.size());
  nodes_.push_back(node);
  cons_slots_[slot] = id;
  return id;
}

ByteSet RegexStore::bytes_of(NodeId x) const {
  ByteSet m;
  std::memcpy(m.w.data(), args(x), 32);
  return m;
}

NodeId RegexStore::bytes(const ByteSet& m) {
  if (m.empty()) return NOTHING;
  uint32_t a[8];
  std::memcpy(a, m.w.data(), 32);
  if (2 * (nodes_.size() + 1) > cons_slots_.size()) grow_cons();
  uint32_t known = cons_slots_[find_node(K_BYTES, a, 8, hash_key(K_BYTES, a, 8))];
  if (known != kFree) return known;
  std::array<uint8_t, 256> lab{};
  bool b0 = m.has(0);
  for (int b = 0; b < 256; b++) lab[b] = uint8_t(m.has(b) != b0);
  return mk(K_BYTES, a, 8, false, intern_partition(lab));
}

NodeId RegexStore::concat2(NodeId h, NodeId t) {
  if (h == NOTHING || t == NOTHING) return NOTHING;
  if (h == EPSILON) return t;
  if (nodes_[h].kind != K_CONCAT) {  // the common case (a literal's bytes, a derivative's head)
    if (t == EPSILON) return h;
    uint32_t a[2] = {h, t};
    uint32_t part = nodes_[h].null ? refine(nodes_[h].part, nodes_[t].part) : nodes_[h].part;
    return mk(K_CONCAT, a, 2, nodes_[h].null && nodes_[t].null, part);
  }
  std::vector<NodeId> items;
  NodeId x = h;
  while (nodes_[x].kind == K_CONCAT) {
    items.push_back(args(x)[0]);
    x = args(x)[1];
  }
  if (x != EPSILON) items.push_back(x);
  NodeId res = t;
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    NodeId hh = *it;
    if (res == EPSILON) {
      res = hh;
      continue;
    }
    uint32_t a[2] = {hh, res};
    uint32_t part = nodes_[hh].null ? refine(nodes_[hh].part, nodes_[res].part) : nodes_[hh].part;
    res = mk(K_CONCAT, a, 2, nodes_[hh].null && nodes_[res].null, part);
  }
  return res;
}

NodeId RegexStore::concat(const std::vector<NodeId>& xs) {
  if (xs.empty()) return EPSILON;
  NodeId res = xs.back();
  for (size_t i = xs.size() - 1; i-- > 0;) res = concat2(xs[i], res);
  return res;
}

NodeId RegexStore::alt(const std::vector<NodeId>& xs) {
  Scratch scratch(*this);
  std::vector<NodeId>& kids = scratch.v;
  ByteSet mask;
  bool has_mask = false;
  auto add = [&](NodeId c) {
    uint8_t k = nodes_[c].kind;
    if (k == K_BYTES) {
      mask = mask | bytes_of(c);
      has_mask = true;
    } else if (k != K_NOTHING) {
      kids.push_back(c);
    }
  };
  for (NodeId x : xs) {
    if (nodes_[x].kind == K_ALT) {
      const uint32_t* a = args(x);
      for (uint32_t i = 0; i < nodes_[x].n; i++) add(a[i]);
    } else {
      add(x);
    }
  }
  for (NodeId c : kids)
    if (c == ANY_BYTES) return ANY_BYTES;
  if (has_mask) kids.push_back(bytes(mask));
  std::sort(kids.begin(), kids.end());
  kids.erase(std::unique(kids.begin(), kids.end()), kids.end());
  if (kids.size() > 1 && kids[0] == EPSILON) {
    bool other_null = false;
    for (size_t i = 1; i < kids.size(); i++) other_null |= nodes_[kids[i]].null;
    if (other_null) kids.erase(kids.begin());
  }
  if (kids.empty()) return NOTHING;
  if (kids.size() == 1) return kids[0];
  bool null = false;
  for (NodeId c : kids) null |= nodes_[c].null;
  return mk(K_ALT, kids.data(), uint32_t(kids.size()), null, partition_of_many(kids));
}

NodeId RegexStore::intersect(const std::vector<NodeId>& xs) {
  Scratch scratch(*this);
  std::vector<NodeId>& kids = scratch.v;
  ByteSet mask = ByteSet::full();
  bool has_mask = false;
  auto add = [&](NodeId c) {
    if (nodes_[c].kind == K_BYTES) {
      mask = mask & bytes_of(c);
      has_mask = true;
    } else if (c != ANY_BYTES) {
      kids.push_back(c);
    }
  };
  for (NodeId x : xs) {
    uint8_t k = nodes_[x].kind;
    if (k == K_NOTHING) return NOTHING;
    if (k == K_AND) {
      const uint32_t* a = args(x);
      for (uint32_t i = 0; i < nodes_[x].n; i++) add(a[i]);
    } else {
      add(x);
    }
  }
  if (has_mask) {
    if (mask.empty()) return NOTHING;
    kids.push_back(bytes(mask));
  }
  std::sort(kids.begin(), kids.end());
  kids.erase(std::unique(kids.begin(), kids.end()), kids.end());
  if (!kids.empty() && kids[0] == EPSILON) {
    for (NodeId c : kids)
      if (!nodes_[c].null) return NOTHING;
    return EPSILON;
  }
  if (kids.empty()) return ANY_BYTES;
  if (kids.size() == 1) return kids[0];
  bool null = true;
  for (NodeId c : kids) null &= nodes_[c].null;
  return mk(K_AND, kids.data(), uint32_t(kids.size()), null, partition_of_many(kids));
}

NodeId RegexStore::complement(NodeId x) {
  if (nodes_[x].kind == K_NOT) return args(x)[0];
  uint32_t a = x;
  return mk(K_NOT, &a, 1, !nodes_[x].null, nodes_[x].part);
}

NodeId RegexStore::star(NodeId x) {
  uint8_t k = nodes_[x].kind;
  if (k == K_NOTHING || k == K_EPS) return EPSILON;
  if (k == K_STAR || x == ANY_BYTES) return x;
  if (k == K_ALT) {
    const uint32_t* a = args(x);
    std::vector<NodeId> rest;
    bool had_eps = false;
    for (uint32_t i = 0; i < nodes_[x].n; i++) {
      if (a[i] == EPSILON) had_eps = true;
      else rest.push_back(a[i]);
    }
    if (had_eps) return star(alt(rest));
  }
  if (k == K_REPEAT && args(x)[1] == 0) return star(args(x)[0]);
  uint32_t a = x;
  return mk(K_STAR, &a, 1, true, nodes_[x].part);
}

NodeId RegexStore::repeat(NodeId x, uint32_t lo, uint32_t hi) {
  if (hi == 0 || x == EPSILON) return EPSILON;
  if (x == NOTHING) return lo == 0 ? EPSILON : NOTHING;
  if (nodes_[x].null) lo = 0;
  if (hi == kInf) {
    if (lo == 0) return star(x);
    if (lo == 1) return concat2(x, star(x));
  } else if (hi == 1) {
    return lo == 1 ? x : alt({EPSILON, x});
  }
  uint32_t a[3] = {x, lo, hi};
  return mk(K_REPEAT, a, 3, lo == 0, nodes_[x].part);
}

NodeId RegexStore::repeat_checked(NodeId x, uint32_t lo, uint32_t hi) {
  if (hi != kInf && hi < lo) throw std::invalid_argument("invalid repetition bounds: min is greater than max");
  const uint32_t limit = regex_limits().max_repeat.load(std::memory_order_relaxed);
  const uint32_t l = nodes_[x].null ? 0 : lo;
  // the shapes repeat() folds into star, option or the body make no counter
  const bool counter = hi > 1 && x > EPSILON && (hi != kInf || l > 1);
  uint64_t w = uint64_t(std::max(l, hi == kInf ? 0u : hi)) * nodes_[x].weight;
  if (counter && nodes_[x].weight > 1 && w > limit)
    throw LimitError("max_repeat", limit,
                     "resource limit max_repeat=" + std::to_string(limit) +
                         " exceeded: nested counted repetition amounts to " + std::to_string(w) + " copies");
  return repeat(x, lo, hi);
}

NodeId RegexStore::literal(const uint8_t* data, size_t n) {
  NodeId res = EPSILON;
  ByteSet one;
  for (size_t i = n; i-- > 0;) {
    one = ByteSet{};
    one.set(data[i]);
    res = concat2(bytes(one), res);
  }
  return res;
}

std::vector<NodeId> RegexStore::copy_from(const RegexStore& from, const std::vector<NodeId>& roots) {
  std::unordered_map<NodeId, NodeId> done;
  std::vector<std::pair<NodeId, bool>> stack;  // (node of `from`, children done)
  std::vector<NodeId> kids;
  for (NodeId root : roots) {
    if (root >= from.nodes_.size()) throw std::out_of_range("unknown regex node");
    stack.emplace_back(root, false);
    while (!stack.empty()) {
      auto [x, expanded] = stack.back();
      stack.pop_back();
      if (done.count(x)) continue;
      const Node& nd = from.nodes_[x];
      const uint32_t* a = from.args(x);
      const uint32_t nk = nd.kind == K_BYTES ? 0 : nd.kind == K_REPEAT ? 1 : nd.n;
      if (!expanded) {
        stack.emplace_back(x, true);
        for (uint32_t i = 0; i < nk; i++)
          if (!done.count(a[i])) stack.emplace_back(a[i], false);
        continue;
      }
      kids.clear();
      for (uint32_t i = 0; i < nk; i++) kids.push_back(done.at(a[i]));
      NodeId y;
      switch (nd.kind) {
        case K_NOTHING: y = NOTHING; break;
        case K_EPS: y = EPSILON; break;
        case K_BYTES: y = bytes(from.bytes_of(x)); break;
        case K_CONCAT: y = concat2(kids[0], kids[1]); break;
        case K_ALT: y = alt(kids); break;
        case K_AND: y = intersect(kids); break;
        case K_NOT: y = complement(kids[0]); break;
        case K_STAR: y = star(kids[0]); break;
        default: y = repeat(kids[0], a[1], a[2]); break;
      }
      done.emplace(x, y);
    }
  }
  std::vector<NodeId> out;
  for (NodeId root : roots) out.push_back(done.at(root));
  return out;
}

bool RegexStore::matches(NodeId x, const uint8_t* data, size_t n) {
  for (size_t i = 0; i < n && x != NOTHING; i++) x = derivative(x, data[i]);
  return nodes_[x].null;
}

NodeId RegexStore::derivative(NodeId x, unsigned b) {
  const Partition& part = parts_[nodes_[x].part];
  uint32_t label = part.label[b];
  if (x >= doff_.size()) doff_.resize(nodes_.size(), kFree);
  uint32_t off = doff_[x];
  if (off == kFree) {
    off = doff_[x] = uint32_t(dtable_.size());
    dtable_.resize(dtable_.size() + part.reps.size(), kFree);
  } else if (dtable_[off + label] != kFree) {
    return dtable_[off + label];
  }
  NodeId r = derive(x, b);  // may grow nodes_, parts_, doff_ and dtable_
  dtable_[off + label] = r;
  return r;
}

NodeId RegexStore::derive(NodeId x, unsigned b) {
  uint8_t k = nodes_[x].kind;
  if (k <= K_EPS) return NOTHING;
  switch (k) {
    case K_BYTES: return bytes_of(x).has(b) ? EPSILON : NOTHING;
    case K_CONCAT: {
      Scratch scratch(*this);
      std::vector<NodeId>& parts = scratch.v;
      while (true) {
        NodeId h = args(x)[0], t = args(x)[1];
        parts.push_back(concat2(derivative(h, b), t));
        if (!nodes_[h].null) break;
        if (nodes_[t].kind != K_CONCAT) {
          parts.push_back(derivative(t, b));
          break;
        }
        x = t;
      }
      return parts.size() > 1 ? alt(parts) : parts[0];
    }
    case K_ALT: {
      uint32_t n = nodes_[x].n;
      Scratch kid_scratch(*this), d_scratch(*this);  // kids copied: derivatives add nodes
      std::vector<NodeId>& kids = kid_scratch.v;
      kids.assign(args(x), args(x) + n);
      std::vector<NodeId>& ds = d_scratch.v;
      if (n >= 16) {  // e.g. an enum of 10k strings: visit only the children that may start with b
        auto it = alt_index_.find(x);
        if (it == alt_index_.end()) {
          std::vector<std::vector<NodeId>> idx(256);
          for (NodeId c : kids)
            for (int bb = 0; bb < 256; bb++)
              if (nodes_[c].first.has(bb)) idx[bb].push_back(c);
          // counted here, so memory_bytes() (asked at every lowering) need not walk the index
          alt_index_bytes_ += map_entry_bytes(sizeof(idx));
          for (auto& r : idx) alt_index_bytes_ += sizeof(r) + r.capacity() * sizeof(NodeId);
          it = alt_index_.emplace(x, std::move(idx)).first;
        }
        for (NodeId c : it->second[b]) ds.push_back(derivative(c, b));
      } else {
        for (NodeId c : kids) ds.push_back(derivative(c, b));
      }
      return alt(ds);
    }
    case K_AND: {
      Scratch kid_scratch(*this), d_scratch(*this);
      std::vector<NodeId>& kids = kid_scratch.v;
      kids.assign(args(x), args(x) + nodes_[x].n);
      std::vector<NodeId>& ds = d_scratch.v;
      for (NodeId c : kids) ds.push_back(derivative(c, b));
      return intersect(ds);
    }
    case K_NOT: return complement(derivative(args(x)[0], b));
    case K_STAR: return concat2(derivative(args(x)[0], b), x);
    case K_REPEAT: {
      NodeId c = args(x)[0];
      uint32_t lo = args(x)[1], hi = args(x)[2];
      NodeId d = derivative(c, b);
      return concat2(d, repeat(c, lo ? lo - 1 : 0, hi == kInf ? kInf : hi - 1));
    }
    default: return NOTHING;
  }
}

bool RegexStore::nonempty(NodeId node) {
  if (!nodes_[node].boolean) return node != NOTHING;
  auto hit = nonempty_memo_.find(node);
  if (hit != nonempty_memo_.end()) return hit->second;
  std::vector<NodeId> frontier{node}, seen{node};
  std::unordered_set<NodeId> seen_set{node};
  bool result = nodes_[node].null;
  while (!frontier.empty() && !result) {
    if (seen.size() > kNonEmptyBudget) {
      result = true;
      break;
    }
    std::vector<NodeId> next;
    for (NodeId x : frontier) {
      uint32_t part = nodes_[x].part;
      for (size_t i = 0; i < parts_[part].reps.size(); i++) {  // derivative() may grow parts_
        NodeId d = derivative(x, parts_[part].reps[i]);
        if (d == NOTHING || !seen_set.insert(d).second) continue;
        auto m = nonempty_memo_.find(d);
        if (nodes_[d].null || (m != nonempty_memo_.end() && m->second) || !nodes_[d].boolean) {
          result = true;
          break;
        }
        seen.push_back(d);
        next.push_back(d);
      }
      if (result) break;
    }
    frontier.swap(next);
  }
  if (result) nonempty_memo_[node] = true;
  else
    for (NodeId x : seen) nonempty_memo_[x] = false;
  return result;
}

const std::array<uint8_t, 256>& preferred_bytes() {
  static const std::array<uint8_t, 256> order = [] {
    std::array<uint8_t, 256> o{};
    std::array<bool, 256> used{};
    size_t n = 0;
    auto add = [&](unsigned lo, unsigned hi) {
      for (unsigned b = lo; b <= hi; b++)
        if (!used[b]) { used[b] = true; o[n++] = uint8_t(b); }
    };
    add('a', 'z'); add('0', '9'); add(' ', ' '); add('A', 'Z'); add(0x21, 0x7e);
    add('\n', '\n'); add('\t', '\t'); add(0, 255);
    return o;
  }();
  return order;
}

bool RegexStore::shortest(NodeId node, uint32_t max_nodes, std::string& out) {
  struct Step { NodeId x; uint32_t parent; uint8_t byte; };
  std::vector<Step> steps{{node, UINT32_MAX, 0}};
  std::unordered_map<NodeId, bool> seen{{node, true}};
  const std::array<uint8_t, 256>& order = preferred_bytes();
  for (size_t i = 0; i < steps.size(); i++) {
    NodeId x = steps[i].x;
    if (nodes_[x].null) {
      out.clear();
      for (size_t k = i; steps[k].parent != UINT32_MAX; k = steps[k].parent) out.push_back(char(steps[k].byte));
      std::reverse(out.begin(), out.end());
      return true;
    }
    const std::array<uint8_t, 256> label = parts_[nodes_[x].part].label;  // derivative() may grow parts_
    std::array<bool, 256> done{};
    for (uint8_t b : order) {
      if (done[label[b]]) continue;
      done[label[b]] = true;
      NodeId d = derivative(x, b);
      if (d == NOTHING || !seen.emplace(d, true).second) continue;
      if (steps.size() >= max_nodes) return false;
      steps.push_back({d, uint32_t(i), b});
    }
  }
  return false;
}

}  // namespace lexguide
