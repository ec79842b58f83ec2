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

// The repeatable --template-var NAME=VALUE options (UsageError naming a malformed one).
std::vector<TemplateVar> parse_template_vars(const Args& args);

// --weights FMT (how the model's weight matrices are held), shared by the model-loading
// commands; weights_arg() checks it before the (slow) model load (UsageError naming it).
OptionSpec weights_option();
std::string weights_arg(const Args& args);
// --temperature, --top-k, --top-p, --repetition-penalty, --seed (generate, chat), and the
// sampling they give, checked before the (slow) model load (UsageError naming the problem).
std::vector<OptionSpec> sampling_option_specs();
SamplingParams sampling_arg(const Args& args);

// --threads: 0 (every core, the default) or a count; more than the machine's cores is clamped
// with a warning (set_compute_threads).
OptionSpec threads_option(const std::string& help = "CPU threads (default: all cores)");
int threads_arg(const Args& args);
// --kv-dtype, likewise (kv_dtype_arg checks it first).
OptionSpec kv_dtype_option();
std::string kv_dtype_arg(const Args& args);
// --device auto|cpu|cuda (compute_device.h), likewise; default auto.
OptionSpec device_option();
std::string device_arg(const Args& args);
// --image-size (vision-language checkpoints), checked likewise (0 when not given).
OptionSpec image_size_option();
int image_size_arg(const Args& args);

// "12m05s" / "1h02m" for progress lines.
std::string format_duration(double seconds);

// A number as help and error texts show it: "%g", or without decimals when `integer`.
std::string number_text(double x, bool integer = false);

}  // namespace trimkv::cli
