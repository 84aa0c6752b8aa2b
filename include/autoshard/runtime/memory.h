// The memory this machine can give a run, for checks made before allocating.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace autoshard {

// Bytes the kernel reports as available now (MemAvailable in /proc/meminfo),
// or nullopt where that cannot be read. AUTOSHARD_MEMORY_LIMIT (a size, as
// --memory-per-device takes it: "8GiB", "512MB", "1G") overrides it, for
// tests and for sharing a machine; a bad value throws naming it.
std::optional<int64_t> available_memory_bytes();

// "1.23 GiB", "512 MiB", ...
std::string format_bytes(double bytes);

// Always in MiB with two decimals ("12.50 MiB"), for tables that compare rows.
std::string format_in_mib(double bytes);

// The most memory this process has held so far (its peak resident set).
int64_t peak_rss_bytes();

}  // namespace autoshard
