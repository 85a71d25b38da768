// Bytes in 31 buckets, shared by the token trie and the lexer DFA: a trie node records which
// buckets occur anywhere below it (TokenTrie::below), a lexer state which buckets it loops on
// (LexerDFA::loop_buckets: every byte of the bucket leads back to the state itself). When the
// buckets below a node are among those its state loops on, every token of the subtree stays in
// that state, so a walk takes the subtree's tokens at once without visiting it. The buckets
// only decide when that shortcut is tried, never a result: a coarse bucket merely skips less.
// They separate what token texts and common lexemes (string bodies, identifiers, email and
// URI characters, digits, hexadecimal digits, UTF-8 sequences) tell apart. LexerDFA's runs
// (counted repetitions) use them too.
#pragma once

#include <array>
#include <cstdint>

namespace lexguide {

constexpr int kByteBuckets = 31;

constexpr std::array<uint8_t, 256> make_byte_buckets() {
  std::array<uint8_t, 256> t{};
  for (int b = 0; b < 256; b++) {
    uint8_t k = 0;  // controls
    if (b == '\t' || b == '\n' || b == '\r') k = 1;
    else if (b == ' ') k = 2;
    else if (b == '"') k = 3;
    else if (b == '\\') k = 4;
    else if (b >= '0' && b <= '9') k = 5;
    else if (b >= 'a' && b <= 'f') k = 6;  // hexadecimal digits apart
    else if (b >= 'A' && b <= 'F') k = 7;
    else if (b >= 'g' && b <= 'z') k = 29;
    else if (b >= 'G' && b <= 'Z') k = 30;
    else if (b == '_') k = 8;
    else if (b == '-') k = 9;
    else if (b == '.') k = 10;
    else if (b == ',') k = 11;
    else if (b == ':') k = 12;
    else if (b == '/') k = 13;
    else if (b == '@') k = 14;
    else if (b == '{' || b == '}') k = 15;
    else if (b == '[' || b == ']') k = 16;
    else if (b == '(' || b == ')') k = 17;
    else if (b == '+') k = 18;
    else if (b == '\'') k = 19;
    else if (b == '#' || b == '$' || b == '%' || b == '&') k = 20;
    else if (b == '*' || b == '=' || b == '?' || b == '!' || b == '^' || b == '`' || b == '|' || b == '~') k = 21;
    else if (b == ';' || b == '<' || b == '>') k = 22;
    else if (b == 0x7F) k = 23;
    else if (b >= 0x80 && b <= 0xBF) k = 24;
    else if (b >= 0xC2 && b <= 0xDF) k = 25;
    else if (b >= 0xE0 && b <= 0xEF) k = 26;
    else if (b >= 0xF0 && b <= 0xF4) k = 27;
    else if (b >= 0x80) k = 28;  // 0xC0, 0xC1, 0xF5..0xFF: never in UTF-8
    t[size_t(b)] = k;
  }
  return t;
}

inline constexpr std::array<uint8_t, 256> kByteBucket = make_byte_buckets();

constexpr std::array<uint8_t, kByteBuckets> count_bucket_bytes() {
  std::array<uint8_t, kByteBuckets> n{};
  for (int b = 0; b < 256; b++) n[kByteBucket[size_t(b)]]++;
  return n;
}
inline constexpr std::array<uint8_t, kByteBuckets> kBucketBytes = count_bucket_bytes();  // bytes per bucket

inline constexpr uint32_t bucket_bit(unsigned b) { return uint32_t(1) << kByteBucket[b & 0xFF]; }

constexpr uint32_t ascii_buckets() {
  uint32_t m = 0;
  for (unsigned b = 0; b < 0x80; b++) m |= bucket_bit(b);
  return m;
}
inline constexpr uint32_t kAsciiBuckets = ascii_buckets();  // the buckets of bytes below 0x80

}  // namespace lexguide
