// Minimal command-line option parsing for the `trimkv` subcommands: declared options only,
// --name value or --name=value, flags, repeatable options; errors name the option.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trimkv/core/chat_template.h"
#include "trimkv/core/sampling.h"

namespace trimkv {
struct EngineOptions;
}

namespace trimkv::cli {

// The values a numeric option accepts: integers (integer) or any finite number, from lo to hi.
struct NumericRange {
  bool integer = true;
  double lo = 0, hi = 0;
};

struct OptionSpec {
  std::string name;  // without leading dashes
  std::string value_name;  // empty for a flag
  std::string help;
  bool repeatable = false;
  // Numeric options only (ranged_int / ranged_real): Args refuses a value that does not parse or
  // lies outside the range when it reads the command line, naming the option; --help shows it.
  // Every option read with get_int / get_double / get_int64 has one.
  std::optional<NumericRange> range = std::nullopt;
};

// A numeric option: integers from lo to hi, or any number from lo to hi.
OptionSpec ranged_int(std::string name, std::string value_name, std::string help, int64_t lo, int64_t hi);
OptionSpec ranged_real(std::string name, std::string value_name, std::string help, double lo, double hi);

// The items of a list like "a, b,c" split at `sep`, each trimmed of blanks; empty items dropped
// (kept, as "", with keep_empty: the fields of a CSV line).
std::vector<std::string> split_list(const std::string& s, char sep, bool keep_empty = false);

// `text` as a whole integer from lo to hi (std::stoll's syntax, nothing left over), or nullopt.
std::optional<int64_t> parse_integer(const std::string& text, int64_t lo, int64_t hi);

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  // Throws UsageError for an unknown option or a missing value.
  Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc, char** argv, int first);

  bool has(const std::string& name) const { return m_values.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::string require(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  // Numeric options (declared with a range, already checked): the value, or fallback when absent.
  int get_int(const std::string& name, int fallback) const;
  int64_t get_int64(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  bool flag(const std::string& name) const { return has(name); }
  // --model (a folder, or a Hugging Face repo id found in the local cache), or the embedded demo
  // model when it is not given.
  std::string model_dir() const;

  static std::string usage(const std::string& command, const std::string& summary,
                           const std::vector<OptionSpec>& specs);

 private:
  const NumericRange& range_of(const std::string& name, bool integer) const;

  std::string m_command;
  std::map<std::string, std::vector<std::string>> m_values;
  std::map<std::string, NumericRange> m_ranges;  // numeric options by name
};

// `more` added to `specs` before a trailing --help, so that the help stays last.
void insert_before_help(std::vector<OptionSpec>& specs, const std::vector<OptionSpec>& more);

// The repeatable --template-var NAME=VALUE options (UsageError naming a malformed one).
std::vector<TemplateVar> parse_template_vars(const Args& args);

// How a model-loading command (chat, generate, eval, eval-sweep, info) holds and runs its model:
// --weights FMT (f32, bf16, f16, q8, q4), --kv-dtype T, --device D and --image-size PX, every one of
// them in every such command: added to `specs` before a trailing --help. model_load_args() sets
// those four EngineOptions fields, each value checked before the (slow) model load (UsageError
// naming the option).
void add_model_load_option_specs(std::vector<OptionSpec>& specs);
void model_load_args(const Args& args, EngineOptions& options);
// --gates FILE: the retention gates a model-loading command runs with.
OptionSpec gates_option();
// --temperature, --top-k, --top-p, --repetition-penalty, --seed (generate, chat), and the
// sampling they give, checked before the (slow) model load (UsageError naming the problem).
std::vector<OptionSpec> sampling_option_specs();
SamplingParams sampling_arg(const Args& args);

// --threads: 0 (every core, the default) or a count; more than the machine's cores is clamped
// with a warning (set_compute_threads).
OptionSpec threads_option(const std::string& help = "CPU threads (default: all cores)");
int threads_arg(const Args& args);
// --device auto|cpu|cuda (compute_device.h), checked before the model load; "auto" when absent.
std::string device_arg(const Args& args);

// "12m05s" / "1h02m" for progress lines.
std::string format_duration(double seconds);

// A number as help and error texts show it: "%g", or without decimals when `integer`.
std::string number_text(double x, bool integer = false);

}  // namespace trimkv::cli
