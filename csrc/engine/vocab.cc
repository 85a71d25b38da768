// The vocabulary, its slices and its cache file; see vocab.h.
#include "engine/vocab.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <type_traits>
#include <cstdio>
#include <cstring>

#include "engine/limits.h"

#ifndef LEXGUIDE_VOCAB_SOURCE_HASH
#define LEXGUIDE_VOCAB_SOURCE_HASH "unknown"
#endif

namespace lexguide {

namespace {

std::vector<bool> special_flags(size_t n, const std::vector<uint32_t>& eos, const std::vector<uint32_t>& special) {
  std::vector<bool> out(n, false);
  for (uint32_t id : special) {
    if (id >= n) throw std::invalid_argument("special token id outside the vocabulary");
    out[id] = true;
  }
  for (uint32_t id : eos) {
    if (id >= n) throw std::invalid_argument("eos token id outside the vocabulary");
    out[id] = true;
  }
  return out;
}

std::vector<bool> negated(const std::vector<bool>& v) {
  std::vector<bool> out(v);
  out.flip();
  return out;
}
}  // namespace

int utf8_plain_next(int u, unsigned b) {
  switch (u) {
    case 0:
      if (b < 0x80) return b >= 0x20 && b != 0x7F && b != '"' && b != '\\' ? 0 : -1;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 2;
      if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 3;
      if (b == 0xED) return 4;
      if (b == 0xF0) return 5;
      if (b >= 0xF1 && b <= 0xF3) return 6;
      if (b == 0xF4) return 7;
      return -1;
    case 1: return b >= 0x80 && b <= 0xBF ? 0 : -1;
    case 2: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 3: return b >= 0x80 && b <= 0xBF ? 1 : -1;
    case 4: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 5: return b >= 0x90 && b <= 0xBF ? 3 : -1;
    case 6: return b >= 0x80 && b <= 0xBF ? 3 : -1;
    case 7: return b >= 0x80 && b <= 0x8F ? 3 : -1;
    default: return -1;
  }
}

// -- Vocab ------------------------------------------------------------------------------------
Vocab::Vocab(std::shared_ptr<const TokenBytes> token_bytes, std::vector<uint32_t> eos_ids,
             const std::vector<uint32_t>& special_ids, bool)
    : tokens_(std::move(token_bytes)), eos_(std::move(eos_ids)) {
  if (!tokens_ || tokens_->size() == 0) throw std::invalid_argument("empty vocabulary");
  if (tokens_->size() > kMaxVocab) throw std::invalid_argument("vocabulary too large");
  special_ = special_flags(tokens_->size(), eos_, special_ids);
}

Vocab::Vocab(std::shared_ptr<const TokenBytes> token_bytes, std::vector<uint32_t> eos_ids, std::vector<uint32_t> special_ids)
    : Vocab(std::move(token_bytes), std::move(eos_ids), special_ids, true) {
  const TokenBytes& tb = *tokens_;
  tries_.emplace_back(tb, negated(special_));
  const std::vector<bool> plain = plain_tokens();
  for (uint32_t id : tries_[0].token_order())
    if (plain[id]) max_plain_len_ = std::max<uint32_t>(max_plain_len_, uint32_t(tb[id].size()));
  for (int k = 0; k < kSliceLevels; k++) {
    std::vector<uint32_t> words(n_words(), 0);
    std::vector<uint32_t> rest;  // in the main trie's order: no sort
    for (uint32_t id : tries_[0].token_order()) {
      if (plain[id] && tb[id].size() <= kSliceLengths[k])
        set_bit(words.data(), id);
      else
        rest.push_back(id);
    }
    tries_.emplace_back(tb, std::move(rest));
    slice_words_.push_back(std::move(words));
  }
  for (TokenTrie& t : tries_) t.mark_plain(plain);
}

std::vector<bool> Vocab::plain_tokens() const {
  const TokenBytes& tb = *tokens_;
  std::vector<bool> plain(tb.size(), false);
  for (uint32_t id : tries_[0].token_order()) {  // text tokens with bytes
    int u = 0;
    for (unsigned char c : tb[id])
      if ((u = utf8_plain_next(u, c)) < 0) break;
    plain[id] = u == 0;
  }
  return plain;
}

size_t Vocab::memory_bytes() const {
  size_t n = tokens_->memory_bytes() + special_.size() / 8;
  for (auto& t : tries_) n += t.memory_bytes();
  n += slice_words_.size() * size_t(n_words()) * 4;
  return n;
}

bool Vocab::operator==(const Vocab& o) const {
  return tokens_->blob() == o.tokens_->blob() && tokens_->offsets() == o.tokens_->offsets() && eos_ == o.eos_ &&
         special_ == o.special_ && tries_ == o.tries_ && slice_words_ == o.slice_words_ &&
         max_plain_len_ == o.max_plain_len_;
}

// -- the cache file ---------------------------------------------------------------------------
// Layout (host byte order, checked by `endian`): a FileHeader, then the sections back to back
// without padding: for each of the 1 + kSliceLevels tries its node bytes (u8), depths (u16),
// token ranges (u32, nodes + 1) and token ids (u32), then the slice bitmasks (u32, kSliceLevels
// x n_words). Token bytes are not stored: the key (a hash of them) proves the caller's equal.
namespace {
constexpr char kMagic[8] = {'L', 'X', 'G', 'V', 'O', 'C', 'A', 'B'};
constexpr uint32_t kEndian = 0x01020304u;
constexpr int kTries = 1 + kSliceLevels;
constexpr int kSections = 4 * kTries + 1;

struct FileHeader {
  char magic[8];
  uint32_t endian;
  uint32_t format;
  uint32_t header_bytes;
  uint32_t n_sections;
  char abi[96];
  uint8_t key[32];
  uint64_t n_tokens;
  uint64_t max_plain_len;
  uint64_t section_bytes[kSections];
  uint64_t section_sum[kSections];
  uint64_t header_sum;  // of every byte above
};
static_assert(std::is_standard_layout_v<FileHeader> && sizeof(FileHeader) % 8 == 0, "FileHeader has no padding");

// XXH64 (Yann Collet's xxHash, 64-bit): a fast checksum, not a MAC
constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL, P3 = 0x165667B19E3779F9ULL,
                   P4 = 0x85EBCA77C2B2AE63ULL, P5 = 0x27D4EB2F165667C5ULL;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t rd64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xround(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
inline uint64_t xmerge(uint64_t h, uint64_t v) { return (h ^ xround(0, v)) * P1 + P4; }

uint64_t xxh64(const void* data, size_t len, uint64_t seed = 0) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const uint8_t* end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    for (; p + 32 <= end; p += 32) {
      v1 = xround(v1, rd64(p));
      v2 = xround(v2, rd64(p + 8));
      v3 = xround(v3, rd64(p + 16));
      v4 = xround(v4, rd64(p + 24));
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = xmerge(xmerge(xmerge(xmerge(h, v1), v2), v3), v4);
  } else {
    h = seed + P5;
  }
  h += uint64_t(len);
  for (; p + 8 <= end; p += 8) h = rotl(h ^ xround(0, rd64(p)), 27) * P1 + P4;
  if (p + 4 <= end) {
    h = rotl(h ^ (uint64_t(rd32(p)) * P1), 23) * P2 + P3;
    p += 4;
  }
  for (; p < end; p++) h = rotl(h ^ (uint64_t(*p) * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

std::string file_abi() {
  std::string s = "lexguide-vocab/" + std::to_string(kVocabFileFormat) + "/" LEXGUIDE_VOCAB_SOURCE_HASH "/";
  for (uint32_t k : kSliceLengths) s += std::to_string(k) + ",";
  s += "/" + std::to_string(kMaxTokenBytes) + "/" + std::to_string(kMaxVocab);
  return s;
}

struct Fd {  // closes on every path
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void read_exact(int fd, void* dst, size_t n, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw VocabFileError(path + ": truncated while reading");
    p += r;
    n -= size_t(r);
  }
}

template <class T>
std::vector<T> read_section(int fd, uint64_t bytes, uint64_t sum, const std::string& path) {
  if (bytes % sizeof(T) != 0) throw VocabFileError(path + ": section size is not a multiple of its element");
  std::vector<T> v(size_t(bytes / sizeof(T)));
  read_exact(fd, v.data(), size_t(bytes), path);
  if (xxh64(v.data(), size_t(bytes)) != sum) throw VocabFileError(path + ": checksum mismatch (corrupt file)");
  return v;
}
}  // namespace

const std::string& vocab_file_abi() {
  static const std::string abi = file_abi();
  return abi;
}

std::shared_ptr<Vocab> Vocab::load(const std::string& path, std::shared_ptr<const TokenBytes> token_bytes,
                                   std::vector<uint32_t> eos_ids, std::vector<uint32_t> special_ids,
                                   const VocabKey& key) {
  // O_NONBLOCK: a FIFO at the path must not block the open (it is then refused as not regular)
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) throw VocabFileError(path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) throw VocabFileError(path + ": not a regular file");
  uint64_t file_size = uint64_t(st.st_size);
  FileHeader h;
  if (file_size < sizeof h) throw VocabFileError(path + ": shorter than a header");
  read_exact(f.fd, &h, sizeof h, path);
  if (std::memcmp(h.magic, kMagic, 8) != 0) throw VocabFileError(path + ": not a lexguide vocabulary file");
  if (h.endian != kEndian) throw VocabFileError(path + ": written on a machine of another byte order");
  if (h.format != kVocabFileFormat || h.header_bytes != sizeof h || h.n_sections != kSections)
    throw VocabFileError(path + ": format " + std::to_string(h.format) + ", expected " +
                         std::to_string(kVocabFileFormat));
  if (xxh64(&h, offsetof(FileHeader, header_sum)) != h.header_sum)
    throw VocabFileError(path + ": header checksum mismatch (corrupt file)");
  const std::string& abi = vocab_file_abi();
  if (abi.size() >= sizeof h.abi || std::memcmp(h.abi, abi.data(), abi.size()) != 0 || h.abi[abi.size()] != 0)
    throw VocabFileError(path + ": written by another build of lexguide's core (stale)");
  if (std::memcmp(h.key, key.data(), key.size()) != 0)
    throw VocabFileError(path + ": key mismatch (another vocabulary)");
  if (!token_bytes || h.n_tokens != token_bytes->size()) throw VocabFileError(path + ": vocabulary size differs");
  uint64_t total = sizeof h;
  for (uint64_t b : h.section_bytes) {
    if (b > file_size) throw VocabFileError(path + ": section larger than the file");
    total += b;
  }
  if (total != file_size) throw VocabFileError(path + ": size differs from its header's (truncated?)");

  std::shared_ptr<Vocab> v;
  try {
    v.reset(new Vocab(std::move(token_bytes), std::move(eos_ids), special_ids, true));
  } catch (const std::invalid_argument& e) {
    throw VocabFileError(path + ": " + e.what());
  }
  uint32_t n_words = v->n_words();
  int s = 0;
  auto sec = [&](auto tag) {
    using T = decltype(tag);
    int i = s++;
    return read_section<T>(f.fd, h.section_bytes[i], h.section_sum[i], path);
  };
  for (int t = 0; t < kTries; t++) {
    auto bytes = sec(uint8_t{});
    auto depths = sec(uint16_t{});
    auto lo = sec(uint32_t{});
    auto ids = sec(uint32_t{});
    try {
      v->tries_.push_back(TokenTrie::from_arrays(std::move(bytes), std::move(depths), std::move(lo), std::move(ids),
                                                 v->n_tokens()));
    } catch (const std::invalid_argument& e) {
      throw VocabFileError(path + ": " + e.what());
    }
  }
  auto words = sec(uint32_t{});
  if (words.size() != size_t(kSliceLevels) * n_words) throw VocabFileError(path + ": slice masks of the wrong size");
  uint32_t tail = v->n_tokens() % 32;
  for (int k = 0; k < kSliceLevels; k++) {
    std::vector<uint32_t> level(words.begin() + ptrdiff_t(k) * n_words, words.begin() + ptrdiff_t(k + 1) * n_words);
    if (tail != 0 && (level.back() >> tail) != 0) throw VocabFileError(path + ": slice mask beyond the vocabulary");
    v->slice_words_.push_back(std::move(level));
  }
  if (h.max_plain_len > v->tokens_->max_len()) throw VocabFileError(path + ": plain length beyond the longest token");
  v->max_plain_len_ = uint32_t(h.max_plain_len);
  const std::vector<bool> plain = v->plain_tokens();  // (derived from the bytes, not stored)
  for (TokenTrie& t : v->tries_) t.mark_plain(plain);
  return v;
}

void Vocab::save(const std::string& path, const VocabKey& key) const {
  FileHeader h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kMagic, 8);
  h.endian = kEndian;
  h.format = kVocabFileFormat;
  h.header_bytes = sizeof h;
  h.n_sections = kSections;
  const std::string& abi = vocab_file_abi();
  if (abi.size() >= sizeof h.abi) throw VocabFileError("ABI string too long");
  std::memcpy(h.abi, abi.data(), abi.size());
  std::memcpy(h.key, key.data(), key.size());
  h.n_tokens = n_tokens();
  h.max_plain_len = max_plain_len_;
  std::vector<uint32_t> words;
  for (auto& w : slice_words_) words.insert(words.end(), w.begin(), w.end());
  std::vector<std::pair<const void*, size_t>> parts;
  for (const TokenTrie& t : tries_) {
    parts.emplace_back(t.bytes_array().data(), t.bytes_array().size());
    parts.emplace_back(t.depth_array().data(), t.depth_array().size() * 2);
    parts.emplace_back(t.token_lo_array().data(), t.token_lo_array().size() * 4);
    parts.emplace_back(t.token_order().data(), t.token_order().size() * 4);
  }
  parts.emplace_back(words.data(), words.size() * 4);
  for (int i = 0; i < kSections; i++) {
    h.section_bytes[i] = parts[size_t(i)].second;
    h.section_sum[i] = xxh64(parts[size_t(i)].first, parts[size_t(i)].second);
  }
  h.header_sum = xxh64(&h, offsetof(FileHeader, header_sum));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw VocabFileError(path + ": " + std::strerror(errno));
  bool ok = std::fwrite(&h, sizeof h, 1, f) == 1;
  for (auto& [p, n] : parts) ok = ok && (n == 0 || std::fwrite(p, n, 1, f) == 1);
  int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw VocabFileError(path + ": write failed: " + std::strerror(err ? err : errno));
}

}  // namespace lexguide
