// An open-addressing hash map from 64-bit keys to small values, for the engine's memo tables
// (derivatives, partition refinements, lexeme ends): one flat array, no allocation per entry (an
// unordered_map node per derivative was a malloc and a free on the path that builds lexer
// states). Linear probing, power-of-two capacity, grown at 1/2 load; the all-ones key is
// reserved as "empty" (memo keys never use it: they pack ids below 2^32 and a byte class).
#pragma once

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

}  // namespace lexguide
