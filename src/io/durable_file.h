// src/io/durable_file.h: writing a file whole or not at all (checkpoints, token files, tokenizers).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace mpt::io::detail {

std::string errno_text(int err);

// fsync of a directory, so a rename inside it survives a crash. `op` prefixes errors ("checkpoint" -> "[checkpoint]").
void fsync_dir(const std::filesystem::path& dir, std::string_view op);

// `bytes` into `path` whole or not at all: a temporary beside it, fsynced, renamed over it, the directory fsynced.
// A file already at `path` stays intact until the rename. Errors name the file and the system's reason.
void write_file_durably(const std::filesystem::path& path, std::string_view bytes, std::string_view op);

}  // namespace mpt::io::detail
