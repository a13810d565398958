// examples/speakers.h: tinyshakespeare as a classification set: each line of speech labelled with who says it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpt_examples {

struct SpeakerLine {
  std::string text;     // one line of a speech, without its newline
  int32_t label = 0;    // index into SpeakerSet::names
  int64_t speech = 0;   // which speech (of the kept speakers) it belongs to, counted from 0
};

struct SpeakerSet {
  std::vector<std::string> names;  // the `classes` speakers with the most lines, most lines first (ties by name)
  std::vector<SpeakerLine> train, held_out;
};

// Splits a play text into speeches (blocks separated by a blank line whose first line is "NAME:"), keeps the lines of
// the `classes` speakers with the most lines, and holds out every `held_out_every`-th of their speeches (whole
// speeches, so that no held-out line has a neighbour of its own speech in training). Throws mpt::Error when the text
// has fewer than `classes` speakers or a split comes out empty.
SpeakerSet speaker_lines(std::string_view text, int classes, int held_out_every);

}  // namespace mpt_examples
