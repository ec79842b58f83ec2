// Evaluation on the synthetic world (issue 6): a world JSONL read back as turns to replay, the
// scoring of generated answers, and the accuracy breakdowns (by question type, and by how far
// back the needed image is: the part that eviction policies are compared on). Plain C++: the
// runner that drives a model (`trimkv eval`) sits on top.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trimkv::vision::world {

struct WorldTurn {
  std::string text;                 // the user's text with its "<image>" placeholders
  std::string answer;               // the expected answer
  std::string type;                 // question type (question_types())
  std::vector<std::string> images;  // the files this turn shows, in placeholder order, resolved
                                    // against the JSONL file's folder
  std::vector<int> about;           // 0-based conversation images the answer depends on
  int images_since = 0;  // images shown after the newest image the answer needs (0: the newest)
  int turns_since = 0;   // user turns since the oldest image the answer needs was shown
  // A scoring turn (long-context "ppl" tasks): the perplexity of the text's last score_last
  // tokens, the text fed raw (no chat template), nothing generated; answer is empty. 0: a question.
  int64_t score_last = 0;
};

struct WorldRecord {
  std::string id;
  int line = 0;  // 1-based line in the JSONL file
  int n_images = 0;
  std::vector<WorldTurn> turns;
};

// Reads a world JSONL (write_world's format, or make-tasks') for replay; at most `limit`
// conversations when limit >= 0. A turn has "answer", or "score_last" (a positive token count) in
// a conversation of that one turn and no images. Error{Io} for a missing file; Error{Format}
// naming the file and line for a malformed line, a placeholder count that differs from the
// images, an "about" image not yet shown, or a scoring turn that is not alone. With `errors`, a bad line is skipped instead and its message ("FILE:LINE: ...") appended
// there (the limit counts lines read, good or bad); Error{Io} is still thrown for the file.
std::vector<WorldRecord> read_world_jsonl(const std::string& path, int64_t limit = -1,
                                          std::vector<std::string>* errors = nullptr);

// Lowercase, whitespace runs collapsed to one space, trimmed, trailing ". ! ?" dropped.
std::string normalize_answer(std::string_view text);

// How a generated answer is scored against the expected one (`--match`).
enum class AnswerMatch {
  // Equal after normalize_answer on both sides: the world's answers are one word, a digit, "top
  // left", "image 2"; anything more or less is wrong.
  Exact,
  // The normalized expected answer occurs in the normalized reply as whole words (no letter or
  // digit touching it on either side): a real model answers "The code for the blue door is
  // 4821." where 4821 is expected; "48210" or "14821" do not count.
  Contains,
};
std::optional<AnswerMatch> answer_match_named(std::string_view name);  // "exact" | "contains"
const char* answer_match_name(AnswerMatch match);
bool answer_correct(std::string_view expected, std::string_view generated, AnswerMatch match = AnswerMatch::Exact);

struct EvalRecord {
  std::string id;        // conversation
  int turn = 0;          // 0-based
  std::string type;
  std::string expected, generated;
  bool correct = false;
  int images_since = 0, turns_since = 0;
  int64_t kv_entries = 0;  // held by the cache after the answer
  int n_images = 0;        // images in the whole conversation
  int64_t kv_bytes = 0;    // same, in bytes
  int64_t peak_kv_entries = 0;  // the most held during the turn, before compressions (not summarized)
  double ms = 0;           // wall time of the turn (prefill + answer)
  // Scoring turns: tokens scored and the sum of their -ln p (correct stays false; they count in
  // the perplexity, not the accuracy).
  int64_t scored_tokens = 0;
  double nll = 0;
};

struct Tally {
  int64_t n = 0, correct = 0;
  double accuracy() const { return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0; }
  void add(bool ok) { ++n, correct += ok ? 1 : 0; }
};

// Perplexity over scoring turns: exp(nll / tokens).
struct NllSum {
  int64_t tokens = 0;
  double nll = 0;
  double perplexity() const;  // 0 when no token
  void add(const EvalRecord& r) { tokens += r.scored_tokens, nll += r.nll; }
};

struct EvalSummary {
  Tally all;  // questions only
  std::map<std::string, Tally> by_type;
  NllSum scored;                              // scoring turns
  std::map<std::string, NllSum> scored_by_type;
  std::map<int, Tally> by_images_since;  // 0..7
  std::map<int, Tally> by_turns_since;   // 0..5
  std::map<int, Tally> by_n_images;      // images in the conversation
  int64_t max_kv_entries = 0;  // over the turns, as held after each answer
  double mean_kv_entries = 0;
  int64_t max_kv_bytes = 0;
  double mean_kv_bytes = 0;
  double seconds = 0;    // sum of the turns' wall time
  int64_t failures = 0;  // conversations that could not be evaluated (set by the runner)
};

EvalSummary summarize(const std::vector<EvalRecord>& records);
// {"accuracy", "n", "correct", "failures", "by_type": {type: {"accuracy", "n", "correct"}},
// "perplexity": {"value", "tokens", "by_type": {type: {"value", "tokens"}}} (when any turn scored),
// "by_images_since": {...}, "by_turns_since": {...}, "by_n_images": {...}, "kv_entries": {"max",
// "mean"}, "kv_peak_entries", "kv_mean_entries", "kv_peak_bytes", "kv_mean_bytes", "seconds"}
// (2-space indent).
std::string summary_json(const EvalSummary& summary);
// One JSON object (one line) per record.
std::string record_json(const EvalRecord& record);

// A metric vs KV budget (eval-sweep): one line per policy through its (budget entries, value)
// points, named in a legend beside the plot; the full cache as a dashed horizontal reference at
// `full_value` (NaN: none) with its point at 100%. With `full_entries` (the full cache's peak) > 0 the x axis
// is the budget in % of it (log scale when the budgets span 4x or more, ticks 1-2-5 per decade)
// with the same ticks in entries along the top; else entries. Written as an RGB PNG. Error{Io}.
struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (entries, value)
};
struct PlotStyle {
  std::string y_label = "accuracy";
  bool fraction = true;  // values in [0, 1], shown as %; false: any values (perplexity)
};
void write_accuracy_plot(const std::string& path, const std::vector<PlotSeries>& series, double full_value,
                         double full_entries, const PlotStyle& style = {});
// Adds the point (entries, value) to the series called `name`, a new series at the end if none is.
void add_plot_point(std::vector<PlotSeries>& series, const std::string& name, double entries, double value);
// The figure's layout, shared by this OpenCV drawing and the Qt Charts one (app/charts): the x
// axis (percent of `full_entries` when > 0, else entries; log when the budgets span 4x or more),
// its round ticks, the y range and ticks, and the legend's order (by the value at each series'
// smallest budget, best first: where the policies differ most).
struct PlotLayout {
  bool percent = false, log_x = false;
  double full_entries = 0;
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  std::vector<double> x_ticks, y_ticks;  // in axis units (% or entries; the value)
  std::vector<size_t> legend;            // indices into the series that have points
  double x_of(double entries) const { return percent ? 100.0 * entries / full_entries : entries; }
  double entries_of(double x) const { return percent ? x * full_entries / 100.0 : x; }
  std::string x_title() const;    // "KV budget (% of the full cache's peak, log scale)"
  std::string top_title() const;  // the entries axis along the top (percent only)
};
PlotLayout plot_layout(const std::vector<PlotSeries>& series, double full_value, double full_entries,
                       const PlotStyle& style = {});
// A tick label: 1K, 2.5K, 12M, 0.25, 35.
std::string format_tick(double v);
// Line colours (RGB) by series index; the learned global policy (dbtrimkv) is drawn thicker.
using PlotRgb = std::array<unsigned char, 3>;
PlotRgb plot_colour(size_t i);
bool plot_emphasised(const std::string& name);
// Round axis ticks: multiples of 1, 2, 2.5 or 5 x 10^k covering [lo, hi], at most max_ticks; on a
// log axis 1, 2 and 5 x 10^k inside [lo, hi].
std::vector<double> round_ticks(double lo, double hi, int max_ticks);
std::vector<double> round_log_ticks(double lo, double hi);

}  // namespace trimkv::vision::world
