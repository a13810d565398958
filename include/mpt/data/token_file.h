// mpt/data/token_file.h: token streams: token files (a header, then uint16 or uint32 ids) mapped, or ids in memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace mpt::data {

// The layout, little-endian: a 32-byte header
//   magic "MPTTOKEN" (8 bytes) | version u32 = 1 | vocab_size u32 | bytes per id u32 (2 or 4) | reserved u32 = 0 |
//   count u64
// then `count` ids of that width. uint16 when the vocabulary fits (<= 65536 ids), uint32 otherwise.
inline constexpr int64_t kTokenFileHeaderBytes = 32;

// Writes `ids` (each in [0, vocab_size)) whole or not at all (a temporary and a rename). An id outside the vocabulary
// is an error naming it and its position, and nothing is written.
void write_token_file(const std::filesystem::path& path, std::span<const int32_t> ids, int64_t vocab_size);

// A stream of token ids that loaders read windows of. Reads may come from several threads at once.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t vocab_size() const = 0;
  // ids [start, start + n) into `out` as int64 (the ops' index type); a range past the end is an error.
  virtual void read(int64_t start, int64_t n, int64_t* out) const = 0;
};

// Ids held in memory (a text tokenized at start-up), each checked against the vocabulary once, here.
class TokenVector final : public TokenSource {
 public:
  TokenVector(std::vector<int32_t> ids, int64_t vocab_size);
  int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
  int64_t vocab_size() const override { return vocab_; }
  void read(int64_t start, int64_t n, int64_t* out) const override;

 private:
  std::vector<int32_t> ids_;
  int64_t vocab_;
};

// A token file mapped read-only: nothing is read until asked, so files larger than memory work. Opening checks the
// header and that the size matches `count`; ids are checked against the vocabulary as they are read. Errors name the
// file and what is wrong. Movable, not copyable; safe to read from several threads.
class TokenFile final : public TokenSource {
 public:
  explicit TokenFile(const std::filesystem::path& path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const override { return count_; }
  int64_t vocab_size() const override { return vocab_; }
  int bytes_per_id() const { return width_; }
  const std::filesystem::path& path() const { return path_; }
  int64_t at(int64_t i) const;  // bounds- and vocabulary-checked
  void read(int64_t start, int64_t n, int64_t* out) const override;

 private:
  std::filesystem::path path_;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
  int64_t count_ = 0, vocab_ = 0;
  int width_ = 2;
};

}  // namespace mpt::data
