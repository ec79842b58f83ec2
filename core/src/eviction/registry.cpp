// The policy registry: names the CLI and GUI use -> declarative info + factory (policies.h).
#include <cmath>
#include <limits>
#include <sstream>

#include "trimkv/core/error.h"
#include "trimkv/core/policies.h"

namespace trimkv {

namespace {

const std::vector<const PolicyEntry*>& entries() {
  static const std::vector<const PolicyEntry*> kAll{
      &full_policy_entry(),   &dbtrimkv_policy_entry(),  &trimkv_policy_entry(),
      &snapkv_policy_entry(), &adakv_policy_entry(),     &pyramidkv_policy_entry(),
      &rkv_policy_entry(),    &h2o_policy_entry(),       &streamingllm_policy_entry(),
      &fastv_policy_entry(),  &visionzip_policy_entry(), &random_policy_entry()};
  return kAll;
}

const PolicyEntry& entry(const std::string& name) {
  for (const PolicyEntry* e : entries())
    if (e->info.name == name) return *e;
  std::string valid;
  for (const PolicyEntry* e : entries()) valid += (valid.empty() ? "" : ", ") + e->info.name;
  TRIMKV_FAIL(Input, "unknown eviction policy '", name, "' (valid: ", valid, ")");
}

std::string option_list(const PolicyInfo& info) {
  if (info.options.empty()) return "none";
  std::string s;
  for (const auto& o : info.options) s += (s.empty() ? "" : ", ") + o.name;
  return s;
}

bool parse_int(const std::string& text, int64_t& out) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size()) return false;
    out = v;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool parse_double(const std::string& text, double& out) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(v)) return false;
    out = v;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::string range_text(const PolicyOptionInfo& o) {
  std::ostringstream os;
  if (o.kind == PolicyOptionInfo::Kind::Choice) {
    for (size_t i = 0; i < o.choices.size(); ++i) os << (i ? "|" : "") << o.choices[i];
  } else {
    os << "[" << o.min << ", " << o.max << "]";
  }
  return os.str();
}

void check_value(const PolicyInfo& info, const PolicyOptionInfo& o, const std::string& value) {
  if (value == "auto" && o.default_value == "auto") return;
  switch (o.kind) {
    case PolicyOptionInfo::Kind::Int: {
      int64_t v = 0;
      TRIMKV_CHECK(parse_int(value, v) && v >= o.min && v <= o.max, Input, "policy ", info.name,
                   ": option ", o.name, "=", value, " must be an integer in ", range_text(o));
      break;
    }
    case PolicyOptionInfo::Kind::Double: {
      double v = 0;
      TRIMKV_CHECK(parse_double(value, v) && v >= o.min && v <= o.max, Input, "policy ", info.name,
                   ": option ", o.name, "=", value, " must be a number in ", range_text(o));
      break;
    }
    case PolicyOptionInfo::Kind::Choice: {
      bool ok = false;
      for (const auto& c : o.choices) ok = ok || c == value;
      TRIMKV_CHECK(ok, Input, "policy ", info.name, ": option ", o.name, "=", value,
                   " must be one of ", range_text(o));
      break;
    }
  }
}

}  // namespace

StreamScores EvictionPolicy::entry_scores(const PolicyContext& ctx) const {
  const KvGeometry& g = ctx.kv->geometry();
  StreamScores s(static_cast<size_t>(g.n_streams()));
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h)
      s[static_cast<size_t>(il * g.n_kv_head + h)].assign(
          static_cast<size_t>(ctx.kv->length(il, h)), std::numeric_limits<float>::quiet_NaN());
  return s;
}

const std::vector<PolicyInfo>& policy_infos() {
  static const std::vector<PolicyInfo> kInfos = [] {
    std::vector<PolicyInfo> v;
    for (const PolicyEntry* e : entries()) v.push_back(e->info);
    return v;
  }();
  return kInfos;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> v;
  for (const PolicyEntry* e : entries()) v.push_back(e->info.name);
  return v;
}

const PolicyInfo& policy_info(const std::string& name) { return entry(name).info; }

PolicyOptions parse_policy_options(const std::vector<std::string>& items) {
  PolicyOptions out;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    TRIMKV_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), Input,
                 "policy option '", item, "' must look like key=value");
    const std::string key = item.substr(0, eq);
    TRIMKV_CHECK(!out.count(key), Input, "policy option '", key, "' given twice");
    out[key] = item.substr(eq + 1);
  }
  return out;
}

void validate_policy_options(const std::string& name, const PolicyOptions& options) {
  OptionReader reader(entry(name).info, options);
  (void)reader;
}

int64_t require_budget(const Budget& budget, const KvGeometry& g, const std::string& policy) {
  TRIMKV_CHECK(!budget.is_unlimited(), Input, "policy ", policy,
               " needs a budget (KV entries per head or global)");
  return budget.global_entries(g);
}

std::unique_ptr<EvictionPolicy> make_policy(const std::string& name, const PolicyOptions& options,
                                            const Budget& budget, const KvGeometry& g) {
  const PolicyEntry& e = entry(name);
  OptionReader reader(e.info, options);
  return e.make(reader, budget, g);
}

// --- OptionReader ------------------------------------------------------------------------------

OptionReader::OptionReader(const PolicyInfo& info, const PolicyOptions& options)
    : m_info(&info), m_options(options) {
  for (const auto& kv : options) {
    bool known = false;
    for (const auto& o : info.options)
      if (o.name == kv.first) {
        known = true;
        check_value(info, o, kv.second);
      }
    TRIMKV_CHECK(known, Input, "policy ", info.name, " has no option '", kv.first,
                 "' (valid: ", option_list(info), ")");
  }
}

const PolicyOptionInfo& OptionReader::spec(const std::string& key) const {
  for (const auto& o : m_info->options)
    if (o.name == key) return o;
  TRIMKV_FAIL(Internal, "policy ", m_info->name, " reads undeclared option '", key, "'");
}

std::string OptionReader::text(const std::string& key) const {
  auto it = m_options.find(key);
  return it != m_options.end() ? it->second : spec(key).default_value;
}

bool OptionReader::is_set(const std::string& key) const { return text(key) != "auto"; }

int64_t OptionReader::get_int(const std::string& key) const {
  TRIMKV_ASSERT(spec(key).kind == PolicyOptionInfo::Kind::Int, key);
  int64_t v = 0;
  TRIMKV_ASSERT(parse_int(text(key), v), "option ", key, " is not set (default auto)");
  return v;
}

double OptionReader::get_double(const std::string& key) const {
  TRIMKV_ASSERT(spec(key).kind == PolicyOptionInfo::Kind::Double, key);
  double v = 0;
  TRIMKV_ASSERT(parse_double(text(key), v), "option ", key, " is not set (default auto)");
  return v;
}

std::string OptionReader::get_choice(const std::string& key) const {
  TRIMKV_ASSERT(spec(key).kind == PolicyOptionInfo::Kind::Choice, key);
  return text(key);
}

}  // namespace trimkv
