// Eviction options shared by the `generate` and `chat` subcommands: --policy, --budget /
// --global-budget, --policy-opt key=value (repeatable), --slack, --whole-prompt-eviction,
// --trace FILE, --trace-csv FILE. Parsed into core's plain EvictionSettings and validated (policy
// name, option keys and values, budget > 0) before any model is loaded.
#pragma once
#include <string>
#include <vector>

#include "args.h"
#include "trimkv/core/eviction_settings.h"
#include "trimkv/core/generation_types.h"

namespace trimkv::cli {

// Appends the eviction options to a command's option table.
void add_policy_option_specs(std::vector<OptionSpec>& specs);
// The list of policies and their options, for --help.
std::string policy_help();
// Reads and validates the eviction options (trimkv::Error{Input} on bad values).
EvictionSettings parse_policy_settings(const Args& args);
// True when the user asked for anything but the default full cache.
bool eviction_requested(const Args& args);
// Writes --trace (JSON, schema in core/include/trimkv/core/trace.h) and --trace-csv (per-head
// counts) when given. Error{Io} naming the file.
void write_trace_outputs(const Args& args, const GenerationResult& result);

}  // namespace trimkv::cli
