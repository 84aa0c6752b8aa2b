// Command-line values, validated where they enter: integers, reals and sizes
// are parsed strictly by autoshard/parse.h (the parsers of the environment
// variables too: no silent clamping, no trailing junk, no hex, no NaN) and
// checked against their range, so a bad value is one clear error naming its
// flag.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace autoshard::cli {

// The value of `flag` as an integer in [lo, hi]; throws autoshard::Error.
int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi);
uint64_t parse_uint64(const std::string& flag, const std::string& text);
// Token ids "1,2,3", each in [0, vocab); at least one, no empty item.
std::vector<int32_t> parse_ids(const std::string& flag, const std::string& text, int64_t vocab);
// A finite real in [lo, hi] (lo_open: excluding lo).
double parse_real(const std::string& flag, const std::string& text, double lo, double hi,
                  bool lo_open = false);
// A size in whole bytes, at least 1: a number with an optional unit (B, KB,
// MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB or K, M, G, T in powers of
// 1024), e.g. "16GiB" (parse_byte_size).
double parse_bytes(const std::string& flag, const std::string& text);

// Options bound to those parsers.
CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int64_t& target, int64_t lo,
                     int64_t hi, const std::string& help);
CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int& target, int lo, int hi,
                     const std::string& help);
CLI::Option* add_seed(CLI::App* cmd, const std::string& flag, uint64_t& target,
                      const std::string& help);
CLI::Option* add_real(CLI::App* cmd, const std::string& flag, double& target, double lo, double hi,
                      bool lo_open, const std::string& help);
CLI::Option* add_real(CLI::App* cmd, const std::string& flag, std::optional<double>& target,
                      double lo, double hi, bool lo_open, const std::string& help);
CLI::Option* add_bytes(CLI::App* cmd, const std::string& flag, double& target,
                       const std::string& help);

}  // namespace autoshard::cli
