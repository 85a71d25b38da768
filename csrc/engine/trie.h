// A vocabulary's text tokens as a prefix tree in one flat array (DFS preorder).
//
// Node 0 is the root (no byte). Each other node holds its last byte, its depth, the size of
// its subtree (itself included), and the range of token ids whose bytes end there (several
// ids may share bytes). Siblings are sorted by byte, so the tokens below a node are one
// contiguous range of nodes and a walk skips a dead subtree with p += size[p] (llguidance's
// toktrie layout, with an explicit depth instead of a pop count).
// Control tokens and tokens without bytes are not in the tree. Immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lexguide {

class TokenTrie {
 public:
  // token_bytes[i]: bytes of token i; is_text[i]: whether it belongs in the tree
  TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& is_text);
  // The same from text token ids already in trie order (sorted by bytes, ties by id), e.g. a
  // subset of another trie's token_order(): no sort.
  TokenTrie(const std::vector<std::string>& token_bytes, std::vector<uint32_t> sorted_ids);
  // Token ids in node order, which is their order sorted by bytes (ties by id).
  const std::vector<uint32_t>& token_order() const { return tok_ids_; }

  uint32_t n_nodes() const { return uint32_t(byte_.size()); }
  uint8_t byte(uint32_t n) const { return byte_[n]; }
  uint16_t depth(uint32_t n) const { return depth_[n]; }
  uint32_t size(uint32_t n) const { return size_[n]; }
  const uint32_t* tokens_begin(uint32_t n) const { return tok_ids_.data() + tok_lo_[n]; }
  const uint32_t* tokens_end(uint32_t n) const { return tok_ids_.data() + tok_lo_[n + 1]; }
  uint16_t max_depth() const { return max_depth_; }
  size_t memory_bytes() const;

 private:
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> size_;
  std::vector<uint32_t> tok_lo_;  // n_nodes + 1 entries: tokens of node n are [lo[n], lo[n+1])
  std::vector<uint32_t> tok_ids_;
  uint16_t max_depth_ = 0;
};

}  // namespace lexguide
