// Trace JSON/CSV export and import (schema in trace.h), and snapshots (snapshot.h).
#include "trimkv/core/trace.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trimkv/core/error.h"
#include "trimkv/core/json_input.h"
#include "trimkv/core/kv_bookkeeping.h"
#include "trimkv/core/snapshot.h"

namespace trimkv {

namespace {

using nlohmann::json;

json counts_json(const ModalityCounts& c) {
  return {{"text", c.text}, {"image", c.image}, {"special", c.special}};
}

template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  TRIMKV_CHECK(j.is_object() && j.contains(key), Format, "trace JSON: ", where, " has no '", key,
               "'");
  try {
    return j.at(key).get<T>();
  } catch (const std::exception& e) {
    TRIMKV_FAIL(Format, "trace JSON: ", where, ".", key, ": ", e.what());
  }
}

ModalityCounts counts_from(const json& j, const std::string& where) {
  ModalityCounts c;
  c.text = field<int64_t>(j, "text", where);
  c.image = field<int64_t>(j, "image", where);
  c.special = field<int64_t>(j, "special", where);
  return c;
}

int64_t nullable(const json& j, const char* key, const std::string& where) {
  TRIMKV_CHECK(j.contains(key), Format, "trace JSON: ", where, " has no '", key, "'");
  return j.at(key).is_null() ? -1 : field<int64_t>(j, key, where);
}

}  // namespace

ModalityCounts EvictionEvent::kept_total() const {
  ModalityCounts c;
  for (const auto& h : heads) c += h.kept;
  return c;
}

ModalityCounts EvictionEvent::evicted_total() const {
  ModalityCounts c;
  for (const auto& h : heads) c += h.evicted;
  return c;
}

bool operator==(const EvictionEvent& a, const EvictionEvent& b) {
  return a.index == b.index && a.kind == b.kind && a.step == b.step && a.n_tokens == b.n_tokens &&
         a.phase == b.phase && a.entries_before == b.entries_before &&
         a.entries_after == b.entries_after && a.blocks_freed == b.blocks_freed &&
         a.select_ms == b.select_ms && a.apply_ms == b.apply_ms && a.heads == b.heads;
}

bool operator==(const Trace& a, const Trace& b) {
  const KvGeometry &ga = a.geometry, &gb = b.geometry;
  return a.policy == b.policy && a.options == b.options && ga.n_layer == gb.n_layer &&
         ga.n_kv_head == gb.n_kv_head && ga.head_dim == gb.head_dim &&
         ga.block_size == gb.block_size && a.budget_global == b.budget_global &&
         a.budget_per_head == b.budget_per_head && a.slack_per_head == b.slack_per_head &&
         a.events == b.events && a.token_merges == b.token_merges;
}

std::string trace_to_json(const Trace& t, int indent) {
  json j;
  j["format"] = "trimkv-trace";
  j["version"] = 1;
  j["policy"] = t.policy;
  j["options"] = t.options;
  j["geometry"] = {{"n_layer", t.geometry.n_layer},
                   {"n_kv_head", t.geometry.n_kv_head},
                   {"head_dim", t.geometry.head_dim},
                   {"block_size", t.geometry.block_size}};
  j["budget"] = {{"global", t.budget_global < 0 ? json(nullptr) : json(t.budget_global)},
                 {"per_head", t.budget_per_head < 0 ? json(nullptr) : json(t.budget_per_head)}};
  j["slack_per_head"] = t.slack_per_head;
  json events = json::array();
  for (const auto& e : t.events) {
    json heads = json::array();
    for (size_t s = 0; s < e.heads.size(); ++s) {
      const HeadEviction& h = e.heads[s];
      heads.push_back({{"layer", static_cast<int>(s) / std::max(1, t.geometry.n_kv_head)},
                       {"head", static_cast<int>(s) % std::max(1, t.geometry.n_kv_head)},
                       {"kept", counts_json(h.kept)},
                       {"evicted", counts_json(h.evicted)},
                       {"evicted_tokens", h.evicted_tokens}});
    }
    events.push_back({{"index", e.index},
                      {"kind", e.kind},
                      {"step", e.step},
                      {"n_tokens", e.n_tokens},
                      {"phase", e.phase},
                      {"entries_before", e.entries_before},
                      {"entries_after", e.entries_after},
                      {"blocks_freed", e.blocks_freed},
                      {"select_ms", e.select_ms},
                      {"apply_ms", e.apply_ms},
                      {"heads", heads}});
  }
  j["events"] = events;
  json merges = json::array();
  for (const auto& m : t.token_merges)
    merges.push_back({{"image_id", m.image_id},
                      {"first_token", m.first_token},
                      {"n_in", m.n_in},
                      {"n_out", m.n_out},
                      {"dominant", m.dominant},
                      {"assignment", m.assignment}});
  j["token_merges"] = merges;
  return j.dump(indent);
}

Trace trace_from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    TRIMKV_FAIL(Format, "trace JSON does not parse: ", e.what());
  }
  TRIMKV_CHECK(j.is_object() && string_field(j, "format", "", "trace JSON") == "trimkv-trace", Format,
               "not a trimkv trace (\"format\" must be \"trimkv-trace\")");
  TRIMKV_CHECK(field<int>(j, "version", "trace") == 1, Format, "trace JSON: unsupported version ",
               j.at("version").dump());
  Trace t;
  t.policy = field<std::string>(j, "policy", "trace");
  t.options = field<std::map<std::string, std::string>>(j, "options", "trace");
  const json& g = j.at("geometry");
  t.geometry.n_layer = field<int>(g, "n_layer", "geometry");
  t.geometry.n_kv_head = field<int>(g, "n_kv_head", "geometry");
  t.geometry.head_dim = field<int>(g, "head_dim", "geometry");
  t.geometry.block_size = field<int>(g, "block_size", "geometry");
  TRIMKV_CHECK(j.contains("budget"), Format, "trace JSON: no 'budget'");
  t.budget_global = nullable(j.at("budget"), "global", "budget");
  t.budget_per_head = nullable(j.at("budget"), "per_head", "budget");
  t.slack_per_head = field<int64_t>(j, "slack_per_head", "trace");
  const int n_streams = t.geometry.n_streams();
  for (const json& e : field<json>(j, "events", "trace")) {
    const std::string where = "events[" + std::to_string(t.events.size()) + "]";
    EvictionEvent ev;
    ev.index = field<int64_t>(e, "index", where);
    ev.kind = field<std::string>(e, "kind", where);
    ev.step = field<int64_t>(e, "step", where);
    ev.n_tokens = field<int64_t>(e, "n_tokens", where);
    ev.phase = field<std::string>(e, "phase", where);
    ev.entries_before = field<int64_t>(e, "entries_before", where);
    ev.entries_after = field<int64_t>(e, "entries_after", where);
    ev.blocks_freed = field<int64_t>(e, "blocks_freed", where);
    ev.select_ms = field<double>(e, "select_ms", where);
    ev.apply_ms = field<double>(e, "apply_ms", where);
    const json heads = field<json>(e, "heads", where);
    TRIMKV_CHECK(heads.is_array() && static_cast<int>(heads.size()) == n_streams, Format,
                 "trace JSON: ", where, ".heads must have ", n_streams, " items");
    for (const json& h : heads) {
      HeadEviction he;
      he.kept = counts_from(field<json>(h, "kept", where), where + ".kept");
      he.evicted = counts_from(field<json>(h, "evicted", where), where + ".evicted");
      he.evicted_tokens = field<std::vector<int32_t>>(h, "evicted_tokens", where);
      ev.heads.push_back(std::move(he));
    }
    t.events.push_back(std::move(ev));
  }
  if (j.contains("token_merges"))
    for (const json& m : j.at("token_merges")) {
      TokenMerge tm;
      tm.image_id = field<int32_t>(m, "image_id", "token_merges");
      tm.first_token = field<int32_t>(m, "first_token", "token_merges");
      tm.n_in = field<int32_t>(m, "n_in", "token_merges");
      tm.n_out = field<int32_t>(m, "n_out", "token_merges");
      tm.dominant = field<std::vector<int32_t>>(m, "dominant", "token_merges");
      tm.assignment = field<std::vector<int32_t>>(m, "assignment", "token_merges");
      t.token_merges.push_back(std::move(tm));
    }
  return t;
}

std::string trace_per_head_csv(const Trace& t) {
  std::ostringstream os;
  os << "event,step,n_tokens,phase,layer,head,kept_text,kept_image,kept_special,evicted_text,"
        "evicted_image,evicted_special\n";
  const int nh = std::max(1, t.geometry.n_kv_head);
  for (const auto& e : t.events)
    for (size_t s = 0; s < e.heads.size(); ++s) {
      const HeadEviction& h = e.heads[s];
      os << e.index << ',' << e.step << ',' << e.n_tokens << ',' << e.phase << ','
         << static_cast<int>(s) / nh << ',' << static_cast<int>(s) % nh << ',' << h.kept.text << ','
         << h.kept.image << ',' << h.kept.special << ',' << h.evicted.text << ',' << h.evicted.image
         << ',' << h.evicted.special << '\n';
    }
  return os.str();
}

KvSnapshot make_snapshot(const KvBookkeeping& kv, const std::vector<std::vector<float>>& scores,
                         int64_t bytes_per_entry) {
  const KvGeometry& g = kv.geometry();
  KvSnapshot s;
  s.geometry = g;
  s.n_tokens = kv.n_tokens();
  s.heads.resize(static_cast<size_t>(g.n_streams()));
  const size_t n_words = (static_cast<size_t>(kv.n_tokens()) + 63) / 64;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  s.keepers.assign(static_cast<size_t>(kv.n_tokens()), 0);
  for (int il = 0; il < g.n_layer; ++il)
    for (int h = 0; h < g.n_kv_head; ++h) {
      const size_t si = static_cast<size_t>(il * g.n_kv_head + h);
      HeadSnapshot& hs = s.heads[si];
      const auto& entries = kv.entries(il, h);
      hs.entries.reserve(entries.size());
      hs.kept_bits.assign(n_words, 0);
      for (size_t e = 0; e < entries.size(); ++e) {
        const TokenInfo& ti = kv.token(entries[e].token_index);
        SnapshotEntry se;
        se.token_index = entries[e].token_index;
        se.log_beta = entries[e].log_beta;
        se.score = si < scores.size() && e < scores[si].size() ? scores[si][e] : nan;
        se.modality = ti.modality;
        se.turn = ti.turn;
        se.image_id = ti.image_id;
        se.tile = ti.tile;
        se.patch_row = ti.patch_row;
        se.patch_col = ti.patch_col;
        hs.entries.push_back(se);
        hs.counts.add(ti.modality);
        ++s.keepers[static_cast<size_t>(se.token_index)];
        hs.kept_bits[static_cast<size_t>(se.token_index) / 64] |= uint64_t{1}
                                                                  << (se.token_index % 64);
      }
      s.totals += hs.counts;
    }
  s.total_entries = kv.total_entries();
  s.bytes_held = kv.total_entries() * bytes_per_entry;
  s.blocks_used = kv.pool().n_used();
  s.blocks_free = kv.pool().n_free();
  s.blocks_capacity = kv.pool().capacity();
  s.peak_blocks_used = kv.pool().peak_used();
  return s;
}

}  // namespace trimkv
