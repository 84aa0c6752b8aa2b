// Files a command writes because the user named them (train --log, plan
// --out and --export-problem, calibrate --out, convert's OUT): one rule for
// all of them, here.
//
// - An existing path is never replaced unless the command was given
//   --overwrite, and then only a regular file (never a directory, a FIFO or
//   a device). The path is checked when the command starts, before any
//   long work.
// - A file is written to a temporary beside it and renamed into place when
//   complete: an error or a kill leaves the old file (or none), never half
//   of one, and the temporary is removed.
// - A log that grows while a run goes on (--log) is created exclusively
//   instead; a resumed run appends to its own log.
#pragma once

#include <CLI/CLI.hpp>
#include <fstream>
#include <string>

namespace autoshard::cli {

// Adds --overwrite to `cmd`: existing output files may be replaced.
CLI::Option* add_overwrite(CLI::App* cmd, bool& overwrite);

// Throws unless `path` may be written as the output of `flag` under the rule
// above. `offer_overwrite`: the command has --overwrite (the error says so).
void check_output_path(const std::string& path, const std::string& flag, bool overwrite,
                       bool offer_overwrite = true);

// Writes `text` to `path` atomically (temporary, fsync, rename), after
// check_output_path. Without `overwrite` a file that appeared meanwhile is
// still not replaced.
void write_output_file(const std::string& path, const std::string& flag, const std::string& text,
                       bool overwrite);

// Opens `path` for a stream written as a run goes on: created new (an
// existing file is an error unless `overwrite`, then truncated), or with
// `append` opened at its end (created when missing).
std::ofstream open_output_stream(const std::string& path, const std::string& flag, bool overwrite,
                                 bool append);

}  // namespace autoshard::cli
