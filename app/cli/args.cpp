#include "args.h"

#include "trimkv/core/compute_device.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/error.h"
#include "trimkv/core/hf_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace trimkv::cli {

std::vector<std::string> split_list(const std::string& s, char sep, bool keep_empty) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(s.find(sep, start), s.size());
    const std::string item = s.substr(start, end - start);
    const size_t a = item.find_first_not_of(" \t\r"), b = item.find_last_not_of(" \t\r");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    else if (keep_empty) out.emplace_back();
    if (end == s.size()) return out;
    start = end + 1;
  }
}

std::string number_text(double x, bool integer) {
  char buf[48];
  if (integer) std::snprintf(buf, sizeof buf, "%.0f", x);
  else std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

namespace {

std::string range_text(const NumericRange& r) {
  return (r.integer ? "an integer from " : "a number from ") + number_text(r.lo, r.integer) + " to " +
         number_text(r.hi, r.integer);
}

// `text` as a number of range r, or UsageError naming the option, the value and the range.
double parse_in_range(const std::string& name, const std::string& text, const NumericRange& r) {
  auto fail = [&] { return UsageError("option '--" + name + "' needs " + range_text(r) + ", got '" + text + "'"); };
  if (r.integer) {
    const std::optional<int64_t> v = parse_integer(text, static_cast<int64_t>(r.lo), static_cast<int64_t>(r.hi));
    if (!v) throw fail();
    return static_cast<double>(*v);
  }
  double x = 0;
  size_t used = 0;
  try {
    x = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(x) || x < r.lo || x > r.hi) throw fail();
  return x;
}

}  // namespace

std::optional<int64_t> parse_integer(const std::string& text, int64_t lo, int64_t hi) {
  int64_t x = 0;
  size_t used = 0;
  try {
    x = std::stoll(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != text.size() || x < lo || x > hi) return std::nullopt;
  return x;
}

OptionSpec ranged_int(std::string name, std::string value_name, std::string help, int64_t lo, int64_t hi) {
  return {std::move(name), std::move(value_name), std::move(help), false,
          NumericRange{true, static_cast<double>(lo), static_cast<double>(hi)}};
}

OptionSpec ranged_real(std::string name, std::string value_name, std::string help, double lo, double hi) {
  return {std::move(name), std::move(value_name), std::move(help), false, NumericRange{false, lo, hi}};
}

Args::Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc, char** argv,
           int first)
    : m_command(command) {
  for (const auto& s : specs)
    if (s.range) m_ranges[s.name] = *s.range;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0)
      throw UsageError("unexpected argument '" + arg + "' for 'trimkv " + command + "'");
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const OptionSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == name) spec = &s;
    if (!spec) throw UsageError("unknown option '--" + name + "' for 'trimkv " + command + "' (see --help)");
    if (spec->value_name.empty()) {
      if (inline_value) throw UsageError("option '--" + name + "' takes no value");
      m_values[name].push_back("");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError("option '--" + name + "' needs a value <" + spec->value_name + ">");
      value = argv[++i];
    }
    if (!spec->repeatable && m_values.count(name))
      throw UsageError("option '--" + name + "' given more than once");
    if (spec->range) parse_in_range(name, value, *spec->range);
    m_values[name].push_back(value);
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = m_values.find(name);
  return it == m_values.end() ? fallback : it->second.back();
}

std::string Args::require(const std::string& name) const {
  if (!has(name)) throw UsageError("'trimkv " + m_command + "' needs --" + name);
  return get(name);
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = m_values.find(name);
  return it == m_values.end() ? std::vector<std::string>{} : it->second;
}

const NumericRange& Args::range_of(const std::string& name, bool integer) const {
  auto it = m_ranges.find(name);
  // A programming error: the option was declared without ranged_int / ranged_real.
  if (it == m_ranges.end() || (integer && !it->second.integer))
    throw std::logic_error("trimkv " + m_command + ": option '--" + name + "' is read as " +
                           (integer ? "an integer" : "a number") + " but not declared as one");
  return it->second;
}

int Args::get_int(const std::string& name, int fallback) const {
  const NumericRange& r = range_of(name, true);
  if (r.lo < INT32_MIN || r.hi > INT32_MAX)
    throw std::logic_error("trimkv " + m_command + ": option '--" + name + "' needs get_int64");
  return has(name) ? static_cast<int>(parse_in_range(name, get(name), r)) : fallback;
}

int64_t Args::get_int64(const std::string& name, int64_t fallback) const {
  const NumericRange& r = range_of(name, true);
  return has(name) ? static_cast<int64_t>(parse_in_range(name, get(name), r)) : fallback;
}

double Args::get_double(const std::string& name, double fallback) const {
  return has(name) ? parse_in_range(name, get(name), range_of(name, false)) : fallback;
}

std::string Args::usage(const std::string& command, const std::string& summary,
                        const std::vector<OptionSpec>& specs) {
  std::ostringstream os;
  os << "usage: trimkv " << command << " [options]\n\n" << summary << "\n\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  --" + s.name + (s.value_name.empty() ? "" : " <" + s.value_name + ">");
    os << left;
    os << std::string(left.size() < 30 ? 30 - left.size() : 1, ' ') << s.help
       << (s.repeatable ? " (repeatable)" : "")
       << (s.range ? " [" + number_text(s.range->lo, s.range->integer) + ".." +
                         number_text(s.range->hi, s.range->integer) + "]"
                   : "")
       << "\n";
  }
  return os.str();
}

std::string Args::model_dir() const { return has("model") ? resolve_model_dir(get("model")) : default_model_dir(); }

std::vector<TemplateVar> parse_template_vars(const Args& args) {
  std::vector<TemplateVar> vars;
  for (const std::string& v : args.all("template-var")) {
    try {
      vars.push_back(parse_template_var(v));
    } catch (const Error& e) {
      throw UsageError(std::string("--template-var: ") + e.what());
    }
  }
  return vars;
}

void add_model_load_option_specs(std::vector<OptionSpec>& specs) {
  const std::vector<OptionSpec> mine = {
      {"weights", "FMT",
       "hold the weight matrices as f32, bf16, f16, q8 (llama.cpp q8_0 blocks) or q4 (q4_0) (default: the "
       "checkpoint's own dtype for bf16/f16 files, f32 otherwise); q8/q4 blocks made at load are cached for the next "
       "load (TRIMKV_WEIGHT_CACHE=0: never)"},
      {"kv-dtype", "T",
       "store the KV cache's K and V as f32, bf16 or f16; attention accumulates in f32 (default: f16 for "
       "checkpoints stored in 16 bits or fewer, f32 for f32 ones); MiB budgets follow it"},
      {"device", "D",
       "where the model runs: cpu, cuda (weights, KV cache and decoder on the GPU; builds against a CUDA "
       "LibTorch 2.x) or auto = the GPU when one can be used (default auto)"},
      ranged_int("image-size", "PX",
                 "image resolution, pixels on a side: SmolVLM/Idefics3 resize the longest edge to PX (fewer tiles "
                 "below the processor's own), Qwen-VL allow PX x PX pixels per image (default: the processor's own)",
                 1, 16384),
  };
  insert_before_help(specs, mine);
}

void insert_before_help(std::vector<OptionSpec>& specs, const std::vector<OptionSpec>& more) {
  auto at = specs.end();
  if (!specs.empty() && specs.back().name == "help") --at;
  specs.insert(at, more.begin(), more.end());
}

OptionSpec gates_option() {
  return {"gates", "FILE", "retention gates file (default: the model folder's own; 'none' = no gates)"};
}

std::vector<OptionSpec> sampling_option_specs() {
  return {ranged_real("temperature", "T", "sampling temperature; 0 = greedy (default 0)", 0, 100),
          ranged_int("top-k", "K", "keep the K most likely tokens (0 = off)", 0, 1 << 24),
          ranged_real("top-p", "P", "nucleus sampling mass (1 = off)", 0, 1),
          ranged_real("repetition-penalty", "R", "penalise tokens already present (1 = off)", 1e-3, 1e3),
          ranged_int("seed", "S", "random seed for sampling (default 0)", 0, 2147483647)};
}

SamplingParams sampling_arg(const Args& args) {
  SamplingParams s;
  s.temperature = static_cast<float>(args.get_double("temperature", 0.0));
  s.top_k = args.get_int("top-k", 0);
  s.top_p = static_cast<float>(args.get_double("top-p", 1.0));
  s.repetition_penalty = static_cast<float>(args.get_double("repetition-penalty", 1.0));
  s.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  try {
    validate(s);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return s;
}

OptionSpec threads_option(const std::string& help) { return ranged_int("threads", "N", help, 0, 1 << 20); }

// More than the machine's cores: set_compute_threads clamps, with a warning.
int threads_arg(const Args& args) { return args.get_int("threads", 0); }

namespace {
// The value of option `name`, checked by `check` before the (slow) model load.
std::string checked_arg(const Args& args, const char* name, void (*check)(const std::string&)) {
  const std::string w = args.get(name);
  try {
    check(w);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return w;
}
}  // namespace

std::string device_arg(const Args& args) {
  const std::string d = checked_arg(args, "device", check_device_option);
  return d.empty() ? "auto" : d;
}

void model_load_args(const Args& args, EngineOptions& options) {
  options.weights = checked_arg(args, "weights", check_weights_option);
  options.kv_dtype = checked_arg(args, "kv-dtype", check_kv_dtype_option);
  options.device = device_arg(args);
  options.image_size = args.get_int("image-size", 0);
}

std::string format_duration(double s) {
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

}  // namespace trimkv::cli
