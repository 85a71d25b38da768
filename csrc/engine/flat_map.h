// Open-addressing hash tables for the engine's memo tables: one flat array each, no allocation
// per entry (an unordered_map node per entry was a malloc and a free, and a lookup missed the
// cache on its bucket, its node and, for a string key, the string). Linear probing,
// power-of-two capacity, grown at 1/2 load.
//
// FlatMap: 64-bit keys to small values (derivatives, partition refinements, lexeme ends); the
// all-ones key is reserved as "empty" (memo keys never use it: they pack ids below 2^32 and a
// byte class).
// KeyIndex: keys that are sequences of words (a parser set's kernel, a list of lexemes) to small
// values; the keys are copied into one pool.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace lexguide {

template <class V>
class FlatMap {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t(0);

  // The value of key, or nullptr.
  const V* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = index(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }
  V* find(uint64_t key) { return const_cast<V*>(static_cast<const FlatMap&>(*this).find(key)); }
  // Inserts key -> value unless key is present; the entry's value, and whether it is new.
  std::pair<V*, bool> emplace(uint64_t key, V value) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (size_t i = index(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) return {&s.value, false};
      if (s.key == kEmpty) {
        s.key = key;
        s.value = value;
        size_++;
        return {&s.value, true};
      }
    }
  }
  template <class F>
  void for_each(F&& f) const {  // f(key, value) for every entry
    for (const Slot& s : slots_)
      if (s.key != kEmpty) f(s.key, s.value);
  }
  size_t size() const { return size_; }
  size_t memory_bytes() const { return slots_.capacity() * sizeof(Slot); }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    V value{};
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;

  size_t index(uint64_t key) const {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return size_t(h ^ (h >> 29)) & mask_;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != kEmpty) emplace(s.key, s.value);
  }
};

using FlatMap64 = FlatMap<uint32_t>;

// The hash of a sequence of words, one multiply-mix per word: KeyIndex's keys, the lexer's
// state entries.
class SeqHash {
 public:
  explicit SeqHash(size_t n) : h_(0x9E3779B97F4A7C15ull ^ n) {}
  void add(uint64_t x) {
    h_ ^= x + 0x9E3779B97F4A7C15ull + (h_ << 6) + (h_ >> 2);
    h_ *= 0xFF51AFD7ED558CCDull;
  }
  uint64_t value() const { return h_ ^ (h_ >> 29); }

 private:
  uint64_t h_;
};

template <class W, class V>
class KeyIndex {
 public:
  // The value of the key k[0..n), or nullptr.
  const V* find(const W* k, size_t n) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = hash(k, n);
    for (size_t i = size_t(h) & mask_;; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if (s == 0) return nullptr;
      if ((s >> 32) == (h >> 32) && equal(uint32_t(s) - 1, k, n)) return &values_[uint32_t(s) - 1];
    }
  }
  const V* find(const std::vector<W>& k) const { return find(k.data(), k.size()); }
  // Inserts k -> value unless k is present; the entry's value, and whether it is new. (The
  // pointer is valid until the next insertion.)
  std::pair<V*, bool> emplace(const W* k, size_t n, V value) {
    if (2 * (values_.size() + 1) > slots_.size()) grow();
    const uint64_t h = hash(k, n);
    size_t i = size_t(h) & mask_;
    for (;; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if (s == 0) break;
      if ((s >> 32) == (h >> 32) && equal(uint32_t(s) - 1, k, n)) return {&values_[uint32_t(s) - 1], false};
    }
    const uint32_t e = uint32_t(values_.size());
    slots_[i] = (h >> 32 << 32) | (uint64_t(e) + 1);
    pool_.insert(pool_.end(), k, k + n);
    starts_.push_back(pool_.size());
    values_.push_back(value);
    return {&values_[e], true};
  }
  std::pair<V*, bool> emplace(const std::vector<W>& k, V value) { return emplace(k.data(), k.size(), value); }
  size_t size() const { return values_.size(); }
  size_t memory_bytes() const {
    return slots_.capacity() * 8 + pool_.capacity() * sizeof(W) + starts_.capacity() * sizeof(size_t) +
           values_.capacity() * sizeof(V);
  }

 private:
  std::vector<uint64_t> slots_;  // upper 32 bits of the key's hash << 32 | entry + 1; 0 empty
  std::vector<W> pool_;          // every key, one after the other
  std::vector<size_t> starts_{0};  // entry e's key is pool_[starts_[e], starts_[e + 1])
  std::vector<V> values_;
  size_t mask_ = 0;

  static uint64_t hash(const W* k, size_t n) {
    SeqHash h(n);
    for (size_t i = 0; i < n; i++) h.add(uint64_t(k[i]));
    return h.value();
  }
  bool equal(uint32_t e, const W* k, size_t n) const {
    const size_t b = starts_[e];
    return starts_[e + 1] - b == n && std::equal(k, k + n, pool_.data() + b);
  }
  void grow() {
    slots_.assign(slots_.empty() ? 64 : 2 * slots_.size(), 0);
    mask_ = slots_.size() - 1;
    for (uint32_t e = 0; e < values_.size(); e++) {
      const uint64_t h = hash(pool_.data() + starts_[e], starts_[e + 1] - starts_[e]);
      size_t i = size_t(h) & mask_;
      while (slots_[i] != 0) i = (i + 1) & mask_;
      slots_[i] = (h >> 32 << 32) | (uint64_t(e) + 1);
    }
  }
};

}  // namespace lexguide
