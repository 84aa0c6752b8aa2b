// The memory this process holds, and sizes for tables. What the machine can
// give a run (available_memory_bytes) and format_bytes live below every layer,
// in autoshard/memory_size.h, included here for the layers that use both.
#pragma once

#include <cstdint>
#include <string>

#include "autoshard/memory_size.h"

namespace autoshard {

// Always in MiB with two decimals ("12.50 MiB"), for tables that compare rows.
std::string format_in_mib(double bytes);

// The most memory this process has held so far (its peak resident set).
int64_t peak_rss_bytes();

}  // namespace autoshard
