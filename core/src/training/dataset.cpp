// JSONL training data for gate training (gate_training.h: load_dataset).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fnv1a.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_training.h"

namespace fs = std::filesystem;

namespace trimkv {

namespace {

// A problem with one line: becomes a warning, the line is skipped.
struct LineProblem {
  std::string what;
};

// The media layout (when given), the vocabulary, truncation and label checks of a read line.
void finish_sample(TrainingSample& s, const std::string& where, const TextModel& model, const DatasetOptions& options,
                   std::vector<std::string>& warnings) {
  if (options.media && s.deferred) {
    options.media->prepare(s);
    s.deferred = false;
  }
  const int64_t vocab = model.config.vocab_size;
  for (int32_t id : s.ids)
    if (id < 0 || id >= vocab)
      throw LineProblem{"token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                        ")"};
  const int64_t n = static_cast<int64_t>(s.ids.size());
  if (n > options.max_len) {
    const int64_t drop = n - options.max_len;
    s.drop_front(drop);
    s.truncated = true;
    warnings.push_back(where + std::to_string(n) + " tokens, longer than --max-len " +
                       std::to_string(options.max_len) + ": the first " + std::to_string(drop) +
                       " were dropped (truncated from the left)");
  }
  if (!s.is_label.empty()) s.is_label[0] = 0;  // nothing predicts the first token
  if (s.ids.size() < 2) throw LineProblem{"fewer than 2 tokens"};
  bool any = false;
  for (uint8_t b : s.is_label) any = any || b;
  if (!any) throw LineProblem{"no answer token left to learn from"};
}

std::string line_prefix(int64_t line) { return "line " + std::to_string(line) + ": "; }

}  // namespace

void prepare_deferred_sample(TrainingSample& sample, const TextModel& model, const DatasetOptions& options,
                             std::vector<std::string>& warnings) {
  const std::string where = line_prefix(sample.line);
  try {
    finish_sample(sample, where, model, options, warnings);
  } catch (const LineProblem& p) {
    TRIMKV_FAIL(Input, where, p.what);
  } catch (const Error& e) {
    TRIMKV_FAIL(Input, where, e.what());
  }
}

Dataset load_dataset(const std::string& path, const TextModel& model, const DatasetOptions& options) {
  TRIMKV_CHECK(options.max_len >= 2, Input, "--max-len must be at least 2, got ", options.max_len);
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot read dataset '", path, "'");
  const fs::path base = fs::path(path).parent_path();
  const Tokenizer* tok = model.tokenizer.get();
  int32_t eos = -1;
  if (!model.config.eos_token_ids.empty()) eos = model.config.eos_token_ids.front();
  else if (tok) eos = tok->config().eos_id;

  Dataset ds;
  uint64_t fnv = kFnv1aOffset;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    fnv = fnv1a("\n", fnv1a(line, fnv));
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    const std::string where = line_prefix(line_no);
    try {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw LineProblem{std::string("not JSON (") + e.what() + ")"};
      }
      if (!j.is_object()) throw LineProblem{"not a JSON object"};
      TrainingSample s;
      s.line = line_no;
      auto encode = [&](const nlohmann::json& field, const char* name, bool add_special) {
        if (!field.is_string()) throw LineProblem{std::string("\"") + name + "\" must be a string"};
        if (!tok)
          throw LineProblem{"model '" + model.dir + "' has no tokenizer.json: give token ids (\"ids\", "
                            "\"text_ids\", \"answer_ids\") instead of text"};
        return tok->encode(field.get<std::string>(), add_special);
      };
      auto ids_of = [&](const nlohmann::json& field, const char* name) {
        if (!field.is_array()) throw LineProblem{std::string("\"") + name + "\" must be an array of token ids"};
        std::vector<int32_t> ids;
        for (const auto& v : field) {
          if (!v.is_number_integer()) throw LineProblem{std::string("\"") + name + "\" holds a non-integer"};
          ids.push_back(v.get<int32_t>());
        }
        return ids;
      };
      auto push = [&](const std::vector<int32_t>& ids, bool label) {
        for (int32_t id : ids) {
          s.ids.push_back(id);
          s.is_label.push_back(label ? 1 : 0);
        }
      };
      if (j.contains("turns")) {
        if (j.contains("images")) {
          if (!j["images"].is_array()) throw LineProblem{"\"images\" must be an array of paths"};
          for (const auto& im : j["images"]) {
            if (!im.is_string()) throw LineProblem{"\"images\" must be an array of paths"};
            fs::path p = im.get<std::string>();
            if (p.is_relative()) p = base / p;
            if (!fs::is_regular_file(p)) throw LineProblem{"image '" + im.get<std::string>() + "' not found"};
            s.images.push_back(p.string());
          }
          if (!s.images.empty() && !options.has_vision && !options.media)
            throw LineProblem{"has " + std::to_string(s.images.size()) + " image(s), but model '" + model.dir +
                              "' has no vision tower (images are not supported for this model)"};
        }
        const auto& turns = j["turns"];
        if (!turns.is_array() || turns.empty()) throw LineProblem{"\"turns\" must be a non-empty array"};
        for (size_t k = 0; k < turns.size(); ++k) {
          const auto& t = turns[k];
          const std::string turn = "turn " + std::to_string(k + 1);
          if (!t.is_object()) throw LineProblem{turn + " is not an object"};
          std::vector<int32_t> prompt, answer;
          if (t.contains("text") && t["text"].is_string() && t.contains("answer") && t["answer"].is_string() &&
              !t.contains("text_ids") && !t.contains("answer_ids"))
            s.turns.push_back({t["text"].get<std::string>(), t["answer"].get<std::string>()});
          if (t.contains("text_ids")) prompt = ids_of(t["text_ids"], "text_ids");
          else if (t.contains("text")) prompt = encode(t["text"].is_string() ? nlohmann::json(t["text"].get<std::string>() + "\n") : t["text"], "text", k == 0);
          else throw LineProblem{turn + " has no \"text\""};
          if (t.contains("answer_ids")) answer = ids_of(t["answer_ids"], "answer_ids");
          else if (t.contains("answer")) answer = encode(t["answer"], "answer", false);
          else throw LineProblem{turn + " has no \"answer\""};
          if (answer.empty()) throw LineProblem{turn + " has an empty answer"};
          if (eos >= 0 && !t.contains("answer_ids")) answer.push_back(eos);
          push(prompt, false);
          push(answer, true);
        }
        if (s.turns.size() != turns.size()) s.turns.clear();  // some turn given as ids
        s.deferred = options.media != nullptr;  // laid out by the media encoder
      } else if (j.contains("text") || j.contains("ids")) {
        std::vector<int32_t> ids = j.contains("ids") ? ids_of(j["ids"], "ids") : encode(j["text"], "text", true);
        push(ids, true);
      } else {
        throw LineProblem{"has neither \"text\", \"ids\" nor \"turns\""};
      }
      if (!(s.deferred && options.defer_media)) finish_sample(s, where, model, options, ds.warnings);
      ds.samples.push_back(std::move(s));
    } catch (const LineProblem& p) {
      ds.warnings.push_back(where + p.what + "; skipped");
    } catch (const Error& e) {
      ds.warnings.push_back(where + e.what() + "; skipped");
    } catch (const nlohmann::json::exception& e) {
      ds.warnings.push_back(where + e.what() + "; skipped");
    }
  }
  ds.n_lines = line_no;
  ds.fingerprint = hex64(fnv);
  TRIMKV_CHECK(!ds.samples.empty(), Input, "dataset '", path, "' has no usable line (", line_no, " lines, ",
               ds.warnings.size(), " skipped", ds.warnings.empty() ? "" : ", first: " + ds.warnings.front(), ")");
  return ds;
}

}  // namespace trimkv
