// The vocabulary as the engine needs it: token bytes, the prefix trees, EOS and control ids,
// and its cache file (a flat binary image of the preprocessed tries, docs/engine.md).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/trie.h"

namespace lexguide {

// Token masks are words of 32 bits: token t is bit t & 31 of word t >> 5.
inline void set_bit(uint32_t* words, uint32_t id) { words[id >> 5] |= uint32_t(1) << (id & 31); }
inline bool has_bit(const uint32_t* words, uint32_t id) { return (words[id >> 5] >> (id & 31)) & 1; }

// JSON-string slices (after llguidance's slicer, docs/engine.md): tokens made only of whole
// UTF-8 characters that a JSON string takes unescaped (no quote, backslash or control
// character) are "plain". Most lexer states inside a string accept every plain token of up to
// k bytes; for such a state the mask takes those tokens as one precomputed bitmask and walks
// only the others, in a prefix tree of its own. Levels: k = 10, 30, and any length.
constexpr int kSliceLevels = 3;
constexpr uint32_t kSliceLengths[kSliceLevels] = {10, 30, 0xFFFFFFFFu};

// The UTF-8 automaton of plain JSON-string characters: utf8_plain_next(u, b) is the state
// after byte b (0: between characters), or -1.
int utf8_plain_next(int u, unsigned b);

// A cache file that cannot be used (missing, truncated, corrupt, foreign, stale); the caller
// builds the vocabulary instead. Also thrown when a file cannot be written.
class VocabFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Format of the cache file; a change to what it holds or how Vocab builds it bumps this (the
// ABI string also carries a hash of this file's and trie.*'s sources, set by CMakeLists.txt).
constexpr uint32_t kVocabFileFormat = 1;
using VocabKey = std::array<uint8_t, 32>;  // the caller's strong hash of tokens, ids and ABI
// "lexguide-vocab/<format>/<source hash>/<slice lengths>/<limits>": what a file must match
const std::string& vocab_file_abi();

class Vocab {
 public:
  Vocab(std::shared_ptr<const TokenBytes> token_bytes, std::vector<uint32_t> eos_ids, std::vector<uint32_t> special_ids);
  // The vocabulary stored at path by save() for the same tokens, ids and key, checked (sizes
  // against the file, a checksum per section, header fields, the tries' structure: no content
  // makes a later walk leave its arrays). Throws VocabFileError saying why it is unusable.
  static std::shared_ptr<Vocab> load(const std::string& path, std::shared_ptr<const TokenBytes> token_bytes,
                                     std::vector<uint32_t> eos_ids, std::vector<uint32_t> special_ids,
                                     const VocabKey& key);
  // Writes the cache file (the caller renames it into place). Throws VocabFileError.
  void save(const std::string& path, const VocabKey& key) const;

  uint32_t n_tokens() const { return uint32_t(tokens_->size()); }
  uint32_t n_words() const { return (n_tokens() + 31) / 32; }
  std::string_view bytes(uint32_t id) const { return (*tokens_)[id]; }
  bool is_special(uint32_t id) const { return special_[id]; }
  const std::vector<uint32_t>& eos_ids() const { return eos_; }
  // trie 0: every text token; trie 1 + k: the tokens outside slice level k
  const TokenTrie& trie(int id = 0) const { return tries_[size_t(id)]; }
  const std::vector<uint32_t>& slice_words(int level) const { return slice_words_[size_t(level)]; }
  uint32_t max_plain_len() const { return max_plain_len_; }
  size_t memory_bytes() const;
  // same tokens, ids and preprocessed tables (tests: a loaded file equals a fresh build)
  bool operator==(const Vocab& o) const;

 private:
  Vocab(std::shared_ptr<const TokenBytes> token_bytes, std::vector<uint32_t> eos_ids,
        const std::vector<uint32_t>& special_ids, bool /*unbuilt*/);
  std::vector<bool> plain_tokens() const;  // per token id: a text token that is plain (trie 0 built)
  std::shared_ptr<const TokenBytes> tokens_;
  std::vector<uint32_t> eos_;
  std::vector<bool> special_;
  std::vector<TokenTrie> tries_;
  std::vector<std::vector<uint32_t>> slice_words_;
  uint32_t max_plain_len_ = 0;
};

}  // namespace lexguide
