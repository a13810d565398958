// src/data/gpt2_bpe_tokenizer.cpp: GPT-2's byte-level BPE: vocab.json and merges.txt, its regex pre-tokenizer, merges.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <climits>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/gpt2_bpe.h"
#include "data/utf8.h"
#include "io/durable_file.h"
#include "mpt/core/error.h"
#include "mpt/data/tokenizer.h"

namespace mpt::data {

namespace {

// GPT-2's pre-tokenizer (OpenAI's encoder.py; Hugging Face's ByteLevel pre-tokenizer uses the same).
constexpr const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";


std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[Gpt2BpeTokenizer] cannot open '{}'", path.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct PcreCode {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct PcreMatch {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

namespace detail {

std::array<uint32_t, 256> gpt2_byte_symbols() {
  std::array<uint32_t, 256> cp{};
  std::array<bool, 256> printable{};
  for (uint32_t b = '!'; b <= '~'; ++b) printable[b] = true;
  for (uint32_t b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (uint32_t b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) cp[b] = printable[b] ? b : next++;
  return cp;
}

}  // namespace detail

struct Gpt2BpeTokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> tokens;                // id -> symbol string
  std::vector<std::pair<std::string, std::string>> merges;
  std::unordered_map<std::string, int> ranks;     // "left right" -> rank
  std::string byte_symbol[256];                   // byte -> its symbol (UTF-8)
  std::unordered_map<uint32_t, unsigned char> symbol_byte;  // symbol code point -> byte
  std::unique_ptr<pcre2_code, PcreCode> regex;

  void build(const char* where) {
    const std::array<uint32_t, 256> cp = detail::gpt2_byte_symbols();
    for (int b = 0; b < 256; ++b) {
      byte_symbol[b] = detail::utf8_of(cp[static_cast<size_t>(b)]);
      symbol_byte[cp[static_cast<size_t>(b)]] = static_cast<unsigned char>(b);
      MPT_CHECK(vocab.count(byte_symbol[b]) != 0,
                "[Gpt2BpeTokenizer] {}: the vocabulary lacks the symbol of byte 0x{:02X} "
                "('{}'): not a byte-level BPE vocabulary", where, b, byte_symbol[b]);
    }
    tokens.assign(vocab.size(), std::string());
    for (const auto& [tok, id] : vocab) tokens[static_cast<size_t>(id)] = tok;
    for (size_t r = 0; r < merges.size(); ++r) {
      const auto& [l, rr] = merges[r];
      MPT_CHECK(vocab.count(l + rr) != 0, "[Gpt2BpeTokenizer] {}: merge {} ('{} {}') makes '{}', which is not in the "
                "vocabulary", where, r + 1, l, rr, l + rr);
      ranks.emplace(l + " " + rr, static_cast<int>(r));  // the first (lowest) rank of a repeated merge wins
    }
    int err = 0;
    PCRE2_SIZE offset = 0;
    regex.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                              &err, &offset, nullptr));
    MPT_CHECK(regex != nullptr, "[Gpt2BpeTokenizer] PCRE2 cannot compile GPT-2's pattern (error {} at {})", err,
              offset);
  }

  // GPT-2's bpe(): merge the lowest-ranked adjacent pair (every occurrence, left to right) until none is ranked.
  void bpe(std::vector<std::string>& w) const {
    while (w.size() > 1) {
      int best = INT_MAX;
      size_t at = 0;
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        const auto it = ranks.find(w[i] + " " + w[i + 1]);
        if (it != ranks.end() && it->second < best) best = it->second, at = i;
      }
      if (best == INT_MAX) return;
      const std::string l = w[at], r = w[at + 1];
      std::vector<std::string> out;
      out.reserve(w.size());
      for (size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && w[i] == l && w[i + 1] == r) {
          out.push_back(l + r);
          i += 2;
        } else {
          out.push_back(w[i++]);
        }
      }
      w.swap(out);
    }
  }
};

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;
Gpt2BpeTokenizer::Gpt2BpeTokenizer(Gpt2BpeTokenizer&&) noexcept = default;
Gpt2BpeTokenizer& Gpt2BpeTokenizer::operator=(Gpt2BpeTokenizer&&) noexcept = default;

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_files(const std::filesystem::path& vocab_json,
                                              const std::filesystem::path& merges_txt) {
  std::vector<std::string> tokens;
  try {
    const nlohmann::json v = nlohmann::json::parse(read_all(vocab_json));
    MPT_CHECK(v.is_object() && !v.empty(), "[Gpt2BpeTokenizer] '{}' is not a JSON object of token -> id",
              vocab_json.string());
    tokens.assign(v.size(), std::string());
    std::vector<bool> seen(v.size(), false);
    for (const auto& [tok, idj] : v.items()) {
      const auto id = idj.get<int64_t>();
      MPT_CHECK(id >= 0 && static_cast<size_t>(id) < v.size() && !seen[static_cast<size_t>(id)],
                "[Gpt2BpeTokenizer] '{}': ids must be 0..{} once each; '{}' has id {}", vocab_json.string(),
                v.size() - 1, tok, id);
      seen[static_cast<size_t>(id)] = true;
      tokens[static_cast<size_t>(id)] = tok;
    }
  } catch (const nlohmann::json::exception& e) {
    MPT_THROW("[Gpt2BpeTokenizer] '{}' is not a GPT-2 vocab.json: {}", vocab_json.string(), e.what());
  }
  std::vector<std::string> merges;
  std::istringstream lines(read_all(merges_txt));
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    MPT_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
              "[Gpt2BpeTokenizer] '{}' line {}: expected two symbols separated by one space, got '{}'",
              merges_txt.string(), n, line);
    merges.push_back(line);
  }
  return from_vocab(tokens, merges, vocab_json.string() + ", " + merges_txt.string());
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  const size_t bad = detail::first_invalid_utf8(text);
  MPT_CHECK(bad == text.size(), "[Gpt2BpeTokenizer] the text is not UTF-8 at byte offset {} (byte 0x{:02X})", bad,
            static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
  const Impl& s = *impl_;
  std::unique_ptr<pcre2_match_data, PcreMatch> md(pcre2_match_data_create_from_pattern(s.regex.get(), nullptr));
  std::vector<int32_t> ids;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  std::vector<std::string> word;
  while (pos < text.size()) {
    const int rc = pcre2_match(s.regex.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    MPT_CHECK(rc > 0, "[Gpt2BpeTokenizer] the pre-tokenizer matched nothing at byte offset {} (PCRE2 status {})", pos,
              rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    MPT_CHECK(ov[0] == pos && ov[1] > ov[0], "[Gpt2BpeTokenizer] the pre-tokenizer skipped bytes at offset {}", pos);
    word.clear();
    for (size_t i = ov[0]; i < ov[1]; ++i) word.push_back(s.byte_symbol[static_cast<unsigned char>(text[i])]);
    s.bpe(word);
    for (const std::string& sym : word) {
      const auto it = s.vocab.find(sym);
      MPT_CHECK(it != s.vocab.end(), "[Gpt2BpeTokenizer] '{}' (a merge result) has no id", sym);
      ids.push_back(it->second);
    }
    pos = ov[1];
  }
  return ids;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& s = *impl_;
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    MPT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "[Gpt2BpeTokenizer] id {} at position {} is outside [0, {})",
              ids[i], i, vocab_size());
    const std::string& tok = s.tokens[static_cast<size_t>(ids[i])];
    for (size_t k = 0; k < tok.size();) {  // each code point of the symbol string is one byte
      const auto c = static_cast<unsigned char>(tok[k]);
      const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = len == 1 ? c : c & (0xFF >> (len + 1));
      for (size_t j = 1; j < len && k + j < tok.size(); ++j)
        cp = cp << 6 | (static_cast<unsigned char>(tok[k + j]) & 0x3F);
      const auto it = s.symbol_byte.find(cp);
      MPT_CHECK(it != s.symbol_byte.end(), "[Gpt2BpeTokenizer] token {} ('{}') holds U+{:04X}, not a byte symbol",
                ids[i], tok, cp);
      out.push_back(static_cast<char>(it->second));
      k += len;
    }
  }
  return out;
}

int64_t Gpt2BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

Vocabulary Gpt2BpeTokenizer::vocabulary() const {
  Vocabulary v{.model = "gpt2", .tokens = impl_->tokens};
  for (const std::string& t : impl_->tokens) v.types.push_back(t == "<|endoftext|>" ? 3 : 1);
  for (const auto& [l, r] : impl_->merges) v.merges.push_back(l + " " + r);
  if (const auto it = impl_->vocab.find("<|endoftext|>"); it != impl_->vocab.end()) v.bos = v.eos = it->second;
  return v;
}

void Gpt2BpeTokenizer::save(const std::filesystem::path& path) const {
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [l, r] : impl_->merges) merges.push_back(l + " " + r);
  const nlohmann::json j{{"format", "mptrain-tokenizer"}, {"version", 1}, {"kind", "gpt2"},
                         {"vocab", impl_->tokens}, {"merges", merges}};
  io::detail::write_file_durably(path, j.dump() + "\n", "tokenizer");
}

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_vocab(const std::vector<std::string>& tokens,
                                              const std::vector<std::string>& merges, const std::string& where) {
  auto impl = std::make_unique<Impl>();
  for (size_t id = 0; id < tokens.size(); ++id) {
    MPT_CHECK(impl->vocab.emplace(tokens[id], static_cast<int32_t>(id)).second,
              "[Gpt2BpeTokenizer] {}: token '{}' appears twice (ids {} and {})", where, tokens[id],
              impl->vocab.at(tokens[id]), id);
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& line = merges[r];
    const size_t sp = line.find(' ');
    MPT_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
              "[Gpt2BpeTokenizer] {}: merge {} '{}' is not two symbols separated by one space", where, r + 1, line);
    impl->merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  impl->build(where.c_str());
  return Gpt2BpeTokenizer(std::move(impl));
}

namespace detail {

std::unique_ptr<Tokenizer> gpt2_from_json(const nlohmann::json& j, const std::string& where) {
  return std::make_unique<Gpt2BpeTokenizer>(Gpt2BpeTokenizer::from_vocab(
      j.at("vocab").get<std::vector<std::string>>(), j.at("merges").get<std::vector<std::string>>(), where));
}

}  // namespace detail

}  // namespace mpt::data
