// examples/train_gpt_session.h: what lets a train_gpt run stop and continue: Ctrl-C/SIGTERM, log continuation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mpt_examples {

// SIGINT and SIGTERM request a stop at the next step boundary (the handler only sets a flag and prints a line); a
// second signal takes the default action (quits at once).
void install_stop_handlers();
bool stop_requested();

// Keeps the JSON lines of `path` whose "step" is below `next_step` (a resumed run writes the others again) and drops
// the rest: records of steps after the checkpoint, "final" records, a line cut off by a crash. Rewritten through a
// temporary and a rename, so the log is never left half-written. A missing file is left missing.
void truncate_log_for_resume(const std::string& path, int64_t next_step);

// FNV-1a 64 of the training text: a resumed run refuses another text.
uint64_t text_fingerprint(std::string_view text);

}  // namespace mpt_examples
