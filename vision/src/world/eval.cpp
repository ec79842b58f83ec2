// World evaluation: replay records, answer scoring, breakdowns.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"
#include "trimkv/vision/world.h"
#include "trimkv/vision/world_eval.h"

namespace trimkv::vision::world {

std::vector<WorldRecord> read_world_jsonl(const std::string& path, int64_t limit, std::vector<std::string>* errors) {
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, path, ": cannot open file");
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::vector<WorldRecord> records;
  std::string line;
  int64_t n_read = 0;
  for (int64_t line_no = 1; (limit < 0 || n_read < limit) && std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++n_read;
    auto where = [&] { return path + ":" + std::to_string(line_no); };
    nlohmann::json j;
    try {
     try {
      j = nlohmann::json::parse(line);
      WorldRecord rec;
      rec.line = static_cast<int>(line_no);
      rec.id = j.at("id").get<std::string>();
      const auto images = j.at("images").get<std::vector<std::string>>();
      rec.n_images = static_cast<int>(images.size());
      std::vector<int> shown_in_turn;  // turn that showed each image
      int n_shown = 0;
      for (const auto& t : j.at("turns")) {
        WorldTurn turn;
        turn.text = t.at("text").get<std::string>();
        if (t.contains("score_last")) {
          turn.score_last = t.at("score_last").get<int64_t>();
          TRIMKV_CHECK(turn.score_last > 0, Format, where(), ": score_last must be positive, got ", turn.score_last);
          TRIMKV_CHECK(!t.contains("answer"), Format, where(), ": a turn has an answer or a score_last, not both");
          TRIMKV_CHECK(j.at("turns").size() == 1 && rec.n_images == 0, Format, where(),
                       ": a scoring turn (score_last) must be the conversation's only turn, without images");
        } else {
          turn.answer = t.at("answer").get<std::string>();
        }
        turn.type = t.value("type", std::string());
        for (size_t at = turn.text.find(kImageToken); at != std::string::npos;
             at = turn.text.find(kImageToken, at + 1)) {
          TRIMKV_CHECK(n_shown < rec.n_images, Format, where(), ": more <image> placeholders than images");
          turn.images.push_back((folder / images[n_shown]).string());
          shown_in_turn.push_back(static_cast<int>(rec.turns.size()));
          ++n_shown;
        }
        if (t.contains("about"))
          for (const auto& k : t.at("about")) {
            const int idx = k.get<int>() - 1;
            TRIMKV_CHECK(idx >= 0 && idx < n_shown, Format, where(), ": turn ", rec.turns.size() + 1,
                         " is about image ", idx + 1, ", which is not shown yet");
            turn.about.push_back(idx);
          }
        if (!turn.about.empty()) {
          const int newest = *std::max_element(turn.about.begin(), turn.about.end());
          const int oldest = *std::min_element(turn.about.begin(), turn.about.end());
          turn.images_since = n_shown - 1 - newest;
          turn.turns_since = static_cast<int>(rec.turns.size()) - shown_in_turn[oldest];
        }
        rec.turns.push_back(std::move(turn));
      }
      TRIMKV_CHECK(n_shown == rec.n_images, Format, where(), ": ", rec.n_images, " images but ", n_shown,
                   " <image> placeholders");
      records.push_back(std::move(rec));
     } catch (const nlohmann::json::exception& e) {
      TRIMKV_FAIL(Format, where(), ": not a world conversation: ", e.what());
     }
    } catch (const Error& e) {
      if (!errors) throw;
      errors->push_back(e.what());
    }
  }
  TRIMKV_CHECK(!in.bad(), Io, path, ": read error");
  return records;
}

std::string normalize_answer(std::string_view text) {
  std::string out;
  bool space = false;
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  while (!out.empty() && (out.back() == '.' || out.back() == '!' || out.back() == '?' || out.back() == ' '))
    out.pop_back();
  return out;
}

std::optional<AnswerMatch> answer_match_named(std::string_view name) {
  if (name == "exact") return AnswerMatch::Exact;
  if (name == "contains") return AnswerMatch::Contains;
  return std::nullopt;
}

const char* answer_match_name(AnswerMatch match) { return match == AnswerMatch::Exact ? "exact" : "contains"; }

bool answer_correct(std::string_view expected, std::string_view generated, AnswerMatch match) {
  const std::string e = normalize_answer(expected), g = normalize_answer(generated);
  if (match == AnswerMatch::Exact || e.empty()) return e == g;
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t at = g.find(e); at != std::string::npos; at = g.find(e, at + 1)) {
    const size_t end = at + e.size();
    if ((at == 0 || !word_char(g[at - 1])) && (end == g.size() || !word_char(g[end]))) return true;
  }
  return false;
}

double NllSum::perplexity() const { return tokens > 0 ? std::exp(nll / static_cast<double>(tokens)) : 0.0; }

EvalSummary summarize(const std::vector<EvalRecord>& records) {
  EvalSummary s;
  double kv_sum = 0, bytes_sum = 0;
  for (const EvalRecord& r : records) {
    if (r.scored_tokens > 0) {
      s.scored.add(r);
      s.scored_by_type[r.type].add(r);
    } else {
      s.all.add(r.correct);
      s.by_type[r.type].add(r.correct);
      s.by_images_since[r.images_since].add(r.correct);
      s.by_turns_since[r.turns_since].add(r.correct);
      s.by_n_images[r.n_images].add(r.correct);
    }
    s.max_kv_entries = std::max(s.max_kv_entries, r.kv_entries);
    kv_sum += static_cast<double>(r.kv_entries);
    s.max_kv_bytes = std::max(s.max_kv_bytes, r.kv_bytes);
    bytes_sum += static_cast<double>(r.kv_bytes);
    s.seconds += r.ms / 1000.0;
  }
  s.mean_kv_entries = records.empty() ? 0.0 : kv_sum / static_cast<double>(records.size());
  s.mean_kv_bytes = records.empty() ? 0.0 : bytes_sum / static_cast<double>(records.size());
  return s;
}

namespace {
nlohmann::ordered_json tally_json(const Tally& t) {
  return {{"accuracy", t.accuracy()}, {"n", t.n}, {"correct", t.correct}};
}
}  // namespace

std::string summary_json(const EvalSummary& s) {
  nlohmann::ordered_json j = tally_json(s.all);
  j["failures"] = s.failures;
  nlohmann::ordered_json by_type = nlohmann::ordered_json::object();
  for (const auto& [type, t] : s.by_type) by_type[type] = tally_json(t);
  nlohmann::ordered_json by_images = nlohmann::ordered_json::object();
  for (const auto& [k, t] : s.by_images_since) by_images[std::to_string(k)] = tally_json(t);
  nlohmann::ordered_json by_turns = nlohmann::ordered_json::object();
  for (const auto& [k, t] : s.by_turns_since) by_turns[std::to_string(k)] = tally_json(t);
  j["by_type"] = by_type;
  j["by_images_since"] = by_images;
  j["by_turns_since"] = by_turns;
  nlohmann::ordered_json by_n = nlohmann::ordered_json::object();
  for (const auto& [k, t] : s.by_n_images) by_n[std::to_string(k)] = tally_json(t);
  j["by_n_images"] = by_n;
  if (s.scored.tokens > 0) {
    auto nll_json = [](const NllSum& n) { return nlohmann::ordered_json{{"value", n.perplexity()}, {"tokens", n.tokens}}; };
    nlohmann::ordered_json ppl = nll_json(s.scored);
    nlohmann::ordered_json ppl_by_type = nlohmann::ordered_json::object();
    for (const auto& [type, n] : s.scored_by_type) ppl_by_type[type] = nll_json(n);
    ppl["by_type"] = ppl_by_type;
    j["perplexity"] = ppl;
  }
  j["kv_entries"] = {{"max", s.max_kv_entries}, {"mean", s.mean_kv_entries}};
  j["kv_peak_entries"] = s.max_kv_entries;
  j["kv_mean_entries"] = s.mean_kv_entries;
  j["kv_peak_bytes"] = s.max_kv_bytes;
  j["kv_mean_bytes"] = s.mean_kv_bytes;
  j["seconds"] = s.seconds;
  return j.dump(2);
}

std::string record_json(const EvalRecord& r) {
  const nlohmann::ordered_json j = {{"id", r.id},
                                    {"turn", r.turn},
                                    {"type", r.type},
                                    {"expected", r.expected},
                                    {"generated", r.generated},
                                    {"correct", r.correct},
                                    {"images_since", r.images_since},
                                    {"turns_since", r.turns_since},
                                    {"n_images", r.n_images},
                                    {"kv_entries", r.kv_entries},
                                    {"kv_bytes", r.kv_bytes},
                                    {"ms", r.ms}};
  if (r.scored_tokens > 0) {
    nlohmann::ordered_json k = j;
    k["scored_tokens"] = r.scored_tokens;
    k["nll"] = r.nll;
    return k.dump();
  }
  return j.dump();
}

}  // namespace trimkv::vision::world
