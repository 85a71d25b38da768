// Hash-consed byte regexes with Brzozowski derivatives (the lexer's algebra).
//
// The one regex store of the process: the Python front ends build their regexes here through
// lexguide.regex.nodes (a facade over the binding's Generation handle), and the lexer derives
// them here. Smart constructors put nodes in a canonical form (ACI-normalised | and &,
// right-nested concatenation, byte sets as 256-bit sets, normalised repetition), so equal
// regexes get equal ids and derivatives stay finite (Brzozowski 1964, modulo ACI). Each node
// carries the coarsest partition of 0..255 whose bytes have equal derivatives (Owens, Reppy &
// Turon 2009, section 4.2); derivatives are memoised per (node, class representative).
//
// Lifetime: a store belongs to one lexer DFA (lexer.h); the pair is one *generation* of the
// process's regexes. A new generation starts from a prefix of the current store (the nodes the
// front ends' modules made at import, same ids), so the memory of a process compiling ever new
// grammars stays bounded while every grammar keeps the generation it was lowered into
// (docs/engine.md, "Limits").
// Ids outside the core: a front end holds a node as an *id* (RegexId): below the store's base
// the node's index, the same in every later generation; from the base on the index with the
// store's tag in the high 32 bits, so that an id of a replaced generation, whose index a new
// generation hands out again, is refused (id_ok) instead of naming another node.
// Thread safety: every store is guarded by store_mutex(); every call below must hold it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/flat_map.h"

namespace lexguide {

using NodeId = uint32_t;
using RegexId = uint64_t;  // a node as the front ends hold it (see above)

enum RxKind : uint8_t { K_NOTHING, K_EPS, K_BYTES, K_CONCAT, K_ALT, K_AND, K_NOT, K_STAR, K_REPEAT };

struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool has(unsigned b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void set(unsigned b) { w[b >> 6] |= uint64_t(1) << (b & 63); }
  bool empty() const { return !(w[0] | w[1] | w[2] | w[3]); }
  ByteSet operator|(const ByteSet& o) const { ByteSet r; for (int i = 0; i < 4; i++) r.w[i] = w[i] | o.w[i]; return r; }
  ByteSet operator&(const ByteSet& o) const { ByteSet r; for (int i = 0; i < 4; i++) r.w[i] = w[i] & o.w[i]; return r; }
  bool operator==(const ByteSet& o) const { return w == o.w; }
  static ByteSet full() { ByteSet r; r.w.fill(~uint64_t(0)); return r; }
};

constexpr NodeId NOTHING = 0;
constexpr NodeId EPSILON = 1;
constexpr NodeId ANY_BYTES = 2;  // ~NOTHING
constexpr uint32_t kInf = 0xFFFFFFFFu;

// A partition of the 256 bytes: label of each byte (byte 0 has label 0, labels by first use)
// and the smallest byte of each byte's class.
struct Partition {
  std::array<uint8_t, 256> label;
  std::array<uint8_t, 256> rep;
  std::vector<uint8_t> reps;  // one representative per label, in label order
  // the bytes grouped by label (ascending within a class): class l is
  // members[first[l]] .. members[first[l + 1] - 1]
  std::array<uint8_t, 256> members;
  std::vector<uint16_t> first;  // reps.size() + 1 offsets into members
};

class RegexStore {
 public:
  RegexStore();
  // A store holding the first `keep` nodes of `from` (at least NOTHING, EPSILON and ANY_BYTES),
  // with the same ids, and none of its memos.
  RegexStore(const RegexStore& from, size_t keep);

  // construction (smart constructors)
  NodeId bytes(const ByteSet& m);
  NodeId concat2(NodeId h, NodeId t);
  NodeId concat(const std::vector<NodeId>& xs);
  NodeId alt(const std::vector<NodeId>& xs);
  NodeId intersect(const std::vector<NodeId>& xs);
  NodeId complement(NodeId x);
  NodeId star(NodeId x);
  NodeId repeat(NodeId x, uint32_t lo, uint32_t hi);  // hi == kInf: unbounded
  // repeat() for a front end: LimitError max_repeat when x has a counted repetition itself and
  // the product of the nested bounds passes regex_limits().max_repeat
  NodeId repeat_checked(NodeId x, uint32_t lo, uint32_t hi);
  // exactly the byte string data[0..n) (a chain of one-byte heads)
  NodeId literal(const uint8_t* data, size_t n);
  // The nodes `roots` of another store, rebuilt here (same languages, this store's ids): a
  // grammar of an older generation reused in a new compile.
  std::vector<NodeId> copy_from(const RegexStore& from, const std::vector<NodeId>& roots);

  // queries
  bool nullable(NodeId x) const { return nodes_[x].null; }
  bool has_boolean(NodeId x) const { return nodes_[x].boolean; }
  RxKind kind(NodeId x) const { return RxKind(nodes_[x].kind); }
  ByteSet bytes_of(NodeId x) const;  // the set of a K_BYTES node
  // x's operands: CONCAT (head, tail), ALT / AND (sorted), NOT / STAR (one), REPEAT (child,
  // lo, hi); none for NOTHING, EPS, BYTES.
  const uint32_t* children(NodeId x) const { return args(x); }
  uint32_t n_children(NodeId x) const { return nodes_[x].kind == K_BYTES ? 0 : nodes_[x].n; }
  uint32_t partition_id(NodeId x) const { return nodes_[x].part; }
  const Partition& partition(uint32_t pid) const { return parts_[pid]; }
  uint32_t refine(uint32_t p, uint32_t q);
  NodeId derivative(NodeId x, unsigned b);
  bool matches(NodeId x, const uint8_t* data, size_t n);  // x matches all of data
  bool nonempty(NodeId x);  // does x match some byte string (bounded search, see limits.h)
  // A shortest byte string x matches (breadth first over derivatives, one byte per class,
  // printable ASCII preferred); false when none is found within max_nodes derivatives.
  bool shortest(NodeId x, uint32_t max_nodes, std::string& out);
  size_t n_nodes() const { return nodes_.size(); }
  // Heap bytes held (an estimate from element counts and container overheads).
  size_t memory_bytes() const;

  // Ids (see above). The first store's base is unset (every id plain) until fix_base(): from
  // then on nodes from n_nodes() on get tagged ids; returns the base. A store made from
  // another keeps min(keep, its base) as its base.
  uint32_t fix_base();
  uint32_t tag() const { return tag_; }  // a counter's (unique until it wraps at 2^32), never 0
  RegexId id_of(NodeId x) const { return x < base_ ? RegexId(x) : (RegexId(tag_) << 32) | x; }
  static NodeId index_of(RegexId id) { return NodeId(id); }
  static uint32_t tag_of(RegexId id) { return uint32_t(id >> 32); }
  // Whether id was handed out by this store or names a base node it shares with the store
  // that handed it out (any index; n_nodes() bounds it)
  bool id_ok(RegexId id) const { return tag_of(id) == 0 ? index_of(id) < base_ : tag_of(id) == tag_; }

 private:
  struct Node {
    uint8_t kind;
    bool null;
    bool boolean;
    uint32_t part;
    uint32_t off;  // args in args_
    uint32_t n;
    uint32_t weight;  // product of the bounds of nested counted repetitions (saturating)
    ByteSet first;
  };
  std::vector<Node> nodes_;
  std::vector<uint32_t> args_;
  uint32_t tag_;
  uint32_t base_ = UINT32_MAX;  // ids of nodes below it are plain (unset: all of them)
  // Hash-consing without allocating a key: open addressing over node ids (kFree = empty), the
  // key being the node's (kind, args) in nodes_/args_; the same for partitions and their labels.
  static constexpr uint32_t kFree = 0xFFFFFFFFu;
  std::vector<uint32_t> cons_slots_;
  std::vector<Partition> parts_;
  std::vector<uint32_t> part_slots_;
  FlatMap64 refine_memo_;
  std::vector<uint16_t> refine_labels_;  // refine()'s scratch: the label of each class pair
  // Derivatives: x's by the bytes of class l (the label of its partition) is
  // dtable_[doff_[x] + l], kFree until asked; doff_[x] is kFree until x is first derived (then
  // one slot per class of x is appended). Two array reads per memo hit; growing copies flat
  // arrays instead of rehashing every entry, a pause that would land on one compile.
  std::vector<uint32_t> doff_;
  std::vector<NodeId> dtable_;
  std::unordered_map<NodeId, std::vector<std::vector<NodeId>>> alt_index_;
  size_t alt_index_bytes_ = 0;  // what alt_index_ holds (its entries never change once made)
  // an unordered_map entry holding a value of `value` bytes: its node (next pointer, cached
  // hash, value) plus a bucket slot
  static constexpr size_t map_entry_bytes(size_t value) { return value + 2 * sizeof(void*) + sizeof(size_t); }
  std::unordered_map<NodeId, bool> nonempty_memo_;
  uint32_t trivial_part_ = 0;
  // Scratch vectors for derive/alt/intersect (recursive, so one per open call), reused so
  // that building a lexer state does not allocate per derivative (malloc and free were ~25%
  // of the instructions of a mask that builds hundreds of key-name states).
  std::vector<std::vector<NodeId>> spare_;
  class Scratch {
   public:
    explicit Scratch(RegexStore& rs) : rs_(rs) {
      if (!rs_.spare_.empty()) {
        v.swap(rs_.spare_.back());
        rs_.spare_.pop_back();
      }
      v.clear();
    }
    ~Scratch() {
      if (v.capacity() <= 4096) rs_.spare_.push_back(std::move(v));
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    std::vector<NodeId> v;

   private:
    RegexStore& rs_;
  };

  const uint32_t* args(NodeId x) const { return args_.data() + nodes_[x].off; }
  size_t find_node(uint8_t kind, const uint32_t* a, uint32_t n, uint64_t h) const;  // its slot
  size_t find_partition(const std::array<uint8_t, 256>& labels, uint64_t h) const;
  uint64_t node_hash(NodeId x) const;
  void reserve_generation(size_t n_nodes);  // n_nodes: at least this many
  void grow_cons(size_t at_least = 0);
  void grow_parts(size_t at_least = 0);
  uint32_t intern_partition(const std::array<uint8_t, 256>& labels);
  uint32_t partition_of_many(const std::vector<NodeId>& kids);
  NodeId mk(uint8_t kind, const uint32_t* a, uint32_t n, bool null, uint32_t part);
  NodeId derive(NodeId x, unsigned b);
};

// Limits of every store (lexguide.regex.nodes.LIMITS sets them; defaults in limits.h).
struct RegexLimits {
  std::atomic<uint32_t> max_nodes;
  std::atomic<uint32_t> max_repeat;
};
RegexLimits& regex_limits();

// Every byte once, in the order shortest strings prefer them (letters, digits, space, other
// printable ASCII, newline, tab, the rest): short completions that tokenize like text.
const std::array<uint8_t, 256>& preferred_bytes();

std::recursive_mutex& store_mutex();

}  // namespace lexguide
