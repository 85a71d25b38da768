// A vocabulary's token bytes (one flat buffer) and its text tokens as a prefix tree in one flat
// array (DFS preorder).
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
#include <string_view>
#include <vector>

#include "engine/byte_buckets.h"

namespace lexguide {

// Every token's bytes in one buffer: token i is blob[offsets[i], offsets[i + 1]).
class TokenBytes {
 public:
  // From the buffer and boundaries already laid out (checked: offsets start at 0, never go
  // down, end at blob.size(); no token longer than kMaxTokenBytes; at most kMaxVocab tokens).
  TokenBytes(std::string blob, std::vector<uint32_t> offsets);
  size_t size() const { return offsets_.size() - 1; }
  std::string_view operator[](size_t i) const {
    return std::string_view(blob_.data() + offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  uint32_t max_len() const { return max_len_; }
  const std::string& blob() const { return blob_; }
  const std::vector<uint32_t>& offsets() const { return offsets_; }  // size() + 1 entries
  size_t memory_bytes() const { return blob_.size() + offsets_.size() * 4; }

 private:
  std::string blob_;
  std::vector<uint32_t> offsets_;
  uint32_t max_len_ = 0;
};

class TokenTrie {
 public:
  // token_bytes[i]: bytes of token i; is_text[i]: whether it belongs in the tree
  TokenTrie(const TokenBytes& token_bytes, const std::vector<bool>& is_text);
  // The same from text token ids already in trie order (sorted by bytes, ties by id), e.g. a
  // subset of another trie's token_order(): no sort.
  TokenTrie(const TokenBytes& token_bytes, std::vector<uint32_t> sorted_ids);
  // A trie from its stored arrays (vocab.cc's cache file), checked so that no walk can leave
  // the arrays whatever their content: depths form a preorder (each node at most one deeper
  // than the one before it, the root alone at depth 0), token ranges are monotone and cover
  // token_ids exactly, every id is below n_tokens. Subtree sizes and the maximum depth are
  // derived. Throws std::invalid_argument naming the first violation.
  static TokenTrie from_arrays(std::vector<uint8_t> bytes, std::vector<uint16_t> depths,
                               std::vector<uint32_t> token_lo, std::vector<uint32_t> token_ids,
                               uint32_t n_tokens);
  // Token ids in node order, which is their order sorted by bytes (ties by id).
  const std::vector<uint32_t>& token_order() const { return tok_ids_; }

  uint32_t n_nodes() const { return uint32_t(byte_.size()); }
  uint8_t byte(uint32_t n) const { return byte_[n]; }
  uint16_t depth(uint32_t n) const { return depth_[n]; }
  uint32_t size(uint32_t n) const { return size_[n]; }
  // The byte buckets (byte_buckets.h) of every node strictly below n.
  uint32_t below(uint32_t n) const { return below_[n]; }
  // The bytes of the longest token below n after n's own (0 for a leaf).
  uint16_t height(uint32_t n) const { return height_[n]; }
  // The bytes of the longest token in n's subtree (n's own included) when every token there is
  // plain (vocab.h: whole UTF-8 characters a JSON string takes unescaped), else kNotPlain; set
  // by mark_plain (kNotPlain everywhere until then).
  static constexpr uint16_t kNotPlain = 0xFFFF;
  uint16_t plain_len(uint32_t n) const { return plain_len_[n]; }
  // Sets plain_len from which tokens are plain (indexed by token id).
  void mark_plain(const std::vector<bool>& plain);
  const uint32_t* tokens_begin(uint32_t n) const { return tok_ids_.data() + tok_lo_[n]; }
  const uint32_t* tokens_end(uint32_t n) const { return tok_ids_.data() + tok_lo_[n + 1]; }
  uint16_t max_depth() const { return max_depth_; }
  size_t memory_bytes() const;
  // the stored arrays (what from_arrays takes back)
  const std::vector<uint8_t>& bytes_array() const { return byte_; }
  const std::vector<uint16_t>& depth_array() const { return depth_; }
  const std::vector<uint32_t>& token_lo_array() const { return tok_lo_; }
  bool operator==(const TokenTrie& o) const;

 private:
  TokenTrie() = default;
  bool derive_sizes();
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> size_;
  std::vector<uint32_t> below_;  // derived with size_
  std::vector<uint16_t> height_;  // derived with size_
  std::vector<uint16_t> plain_len_;  // mark_plain
  std::vector<uint32_t> tok_lo_;  // n_nodes + 1 entries: tokens of node n are [lo[n], lo[n+1])
  std::vector<uint32_t> tok_ids_;
  uint16_t max_depth_ = 0;
};

}  // namespace lexguide
