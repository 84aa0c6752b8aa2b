// Under mpirun every rank parses its own command line. Ranks started with
// different options (or files that differ between hosts) would hang in a
// collective, fail deep inside MPI, or train different replicas without a
// word; so before a command runs, its ranks compare what they were given.
#pragma once

#include <CLI/CLI.hpp>

namespace autoshard::cli {

// Makes every subcommand of `app`, once parsed, compare across MPI ranks all
// of its options and the identity of the files they name (size and a hash
// of each file's first 64 KiB, where a weight file's header lies; each
// regular file of a directory), and stop with one error naming the first
// option that differs and both values. Nothing happens outside mpirun.
void require_agreement_across_ranks(CLI::App& app);

}  // namespace autoshard::cli
