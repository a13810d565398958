// examples/speakers.cpp: tinyshakespeare's speeches split into labelled lines for the fine-tuning example.
#include "speakers.h"

#include <mpt/core/error.h>

#include <algorithm>
#include <map>
#include <utility>

namespace mpt_examples {

namespace {

struct Speech {
  std::string speaker;
  std::vector<std::string> lines;
};

std::vector<Speech> speeches(std::string_view text) {
  std::vector<Speech> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view block = text.substr(pos, end - pos);
    pos = end + 2;
    const size_t first = block.find('\n');
    const std::string_view head = block.substr(0, first);
    if (first == std::string_view::npos || head.size() < 2 || head.back() != ':') continue;  // not a speech
    Speech s{std::string(head.substr(0, head.size() - 1)), {}};
    size_t p = first + 1;
    while (p <= block.size()) {
      size_t e = block.find('\n', p);
      if (e == std::string_view::npos) e = block.size();
      if (e > p) s.lines.emplace_back(block.substr(p, e - p));
      p = e + 1;
    }
    if (!s.lines.empty()) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

SpeakerSet speaker_lines(std::string_view text, int classes, int held_out_every) {
  MPT_CHECK(classes >= 2 && held_out_every >= 2, "[finetune] need at least 2 speakers and a held-out share of at "
            "most one speech in 2, got {} and 1 in {}", classes, held_out_every);
  const std::vector<Speech> all = speeches(text);
  std::map<std::string, int64_t> count;
  for (const Speech& s : all) count[s.speaker] += static_cast<int64_t>(s.lines.size());
  std::vector<std::pair<std::string, int64_t>> ranked(count.begin(), count.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  MPT_CHECK(static_cast<int64_t>(ranked.size()) >= classes, "[finetune] the text has {} speakers (blocks starting "
            "with a \"NAME:\" line), fewer than --speakers {}", ranked.size(), classes);
  SpeakerSet set;
  std::map<std::string, int32_t> label;
  for (int i = 0; i < classes; ++i) {
    set.names.push_back(ranked[static_cast<size_t>(i)].first);
    label[ranked[static_cast<size_t>(i)].first] = i;
  }
  int64_t speech = 0;
  for (const Speech& s : all) {
    const auto it = label.find(s.speaker);
    if (it == label.end()) continue;
    auto& split = speech % held_out_every == held_out_every - 1 ? set.held_out : set.train;
    for (const std::string& line : s.lines) split.push_back({line, it->second, speech});
    ++speech;
  }
  MPT_CHECK(!set.train.empty() && !set.held_out.empty(), "[finetune] the {} kept speeches give {} training and {} "
            "held-out lines: use a longer text", speech, set.train.size(), set.held_out.size());
  return set;
}

}  // namespace mpt_examples
