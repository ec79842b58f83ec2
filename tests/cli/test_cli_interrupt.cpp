// Ctrl-C (SIGINT) and kill -9 sent to a real `trimkv` process mid-work: generate and chat stop
// the answer and finish cleanly, train-gates writes a checkpoint and --resume ends with the same
// gates as an uninterrupted run, to the bit (after SIGINT, and after kill -9, which loses at most
// one checkpoint interval). No thread that computes ever takes these signals (one watcher does).
#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_runner.h"
#include "test_util.h"

namespace {

using trimkv::test::run_cli;
using trimkv::test::run_cli_signalled;

// The tiny random llama (its answers rarely end by themselves) with room for long runs.
std::string long_running_model(const trimkv::test::ScratchDir& dir) {
  trimkv::test::copy_model("llama_gqa", dir.path());
  auto c = trimkv::test::read_json(dir.file("config.json"));
  c["max_position_embeddings"] = 1 << 20;
  trimkv::test::write_text(dir.file("config.json"), c.dump());
  return dir.path();
}

// The "step" of every JSON progress line train-gates printed, and whether it checkpointed.
std::vector<std::pair<int64_t, bool>> steps_of(const std::string& out) {
  std::vector<std::pair<int64_t, bool>> steps;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') {
      const auto j = nlohmann::json::parse(line);
      steps.emplace_back(j["step"].get<int64_t>(), j["checkpointed"].get<bool>());
    }
  return steps;
}

}  // namespace

TEST_CASE("Ctrl-C stops trimkv generate's answer; the run ends cleanly with what it has", "[cli][signal]") {
  trimkv::test::ScratchDir dir("sigint-generate");
  const std::string model = long_running_model(dir);
  // The signal goes once the answer streams (the handler is in place by then, however slow the
  // machine is to load).
  const auto r = run_cli_signalled({"generate", "--model", model, "--prompt-ids", "1,2,3", "--max-new-tokens", "1000000",
                                    "--ignore-eos"},
                                   "", SIGINT, [](const std::string& out, const std::string&) { return out.size() > 500; });
  CAPTURE(r.err, r.ms_after_signal);
  REQUIRE(r.code == 130);  // interrupted, as shells report Ctrl-C; the answer so far is printed
  REQUIRE_THAT(r.err, Catch::Contains("stop: cancelled"));
  CHECK(r.out.size() > 500);
  CHECK(r.ms_after_signal < 1000);  // the step in flight, the summary, and process teardown
}

TEST_CASE("Ctrl-C stops a chat turn and the chat goes on", "[cli][signal]") {
  trimkv::test::ScratchDir dir("sigint-chat");
  const std::string model = long_running_model(dir);
  // After the interrupted turn the chat reads the next line: end of input, so it leaves. The
  // signal goes once the banner is out: it lands in the turn's prefill or in its answer (this
  // random model answers in milliseconds and may end its answer on its own: then the stop finds
  // the chat waiting for input, and the test says nothing; it is tried again, at most 20 times).
  for (int attempt = 0; attempt < 20; ++attempt) {
    const auto r = run_cli_signalled({"chat", "--model", model, "--max-new-tokens", "1000000"}, "Hello there\n",
                                     SIGINT, [](const std::string& out, const std::string&) { return out.size() > 200; });
    CAPTURE(r.out, r.err, r.ms_after_signal);
    const bool in_answer = r.err.find("stop: cancelled") != std::string::npos;
    const bool in_prefill = r.out.find("[stopped before the answer began; the message was not kept]") != std::string::npos;
    if (!in_answer && !in_prefill) continue;
    REQUIRE(r.code == 0);
    CHECK(r.ms_after_signal < 1000);
    return;
  }
  FAIL("every turn ended before the signal");
}

TEST_CASE("train-gates interrupted by Ctrl-C or kill -9 resumes to the same gates as an uninterrupted run",
          "[cli][signal][training]") {
  trimkv::test::ScratchDir dir("sigint-train");
  std::string data;
  for (const char* t : {"The quick brown fox jumps over the lazy dog, again and again, until it is tired.",
                        "Colours and shapes: a red square, a blue circle and a green star on a grey table.",
                        "Numbers one two three four five six seven eight nine and then some more words here."})
    data += nlohmann::json({{"text", std::string(t) + " " + t + " " + t}}).dump() + "\n";
  trimkv::test::write_text(dir.file("d.jsonl"), data);
  const auto args = [&](const std::string& out) {
    return std::vector<std::string>{"train-gates", "--model", trimkv::test::model_dir("llama_gqa"), "--data",
                                    dir.file("d.jsonl"), "--out", out, "--steps", "150", "--checkpoint-every", "1",
                                    "--threads", "1", "--gate-hidden", "8", "--bias-init", "3", "--budget", "8",
                                    "--seed", "3", "--json"};
  };
  const auto with_resume = [&](const std::string& out) {
    auto a = args(out);
    a.push_back("--resume");
    return a;
  };
  const trimkv::test::CliRun whole = run_cli(args(dir.file("whole.safetensors")));
  CAPTURE(whole.err);
  REQUIRE(whole.code == 0);
  const std::string want = trimkv::test::read_bytes(dir.file("whole.safetensors"));
  REQUIRE(want.size() > 100);

  SECTION("SIGINT: a checkpoint at the step it stopped, exit 130, then --resume") {
    const std::string out = dir.file("int.safetensors");
    const auto r = run_cli_signalled(args(out), "", SIGINT, [](const std::string& o, const std::string&) {
      return o.find("\"step\":10,") != std::string::npos;
    });
    CAPTURE(r.out, r.err, r.ms_after_signal);
    REQUIRE(r.code == 130);
    CHECK(r.ms_after_signal < 1000);  // the step in flight, its checkpoint, and process teardown
    REQUIRE_THAT(r.err, Catch::Contains("interrupted at step") && Catch::Contains("--resume"));
    const auto done = steps_of(r.out);
    REQUIRE(!done.empty());
    REQUIRE(done.back().first < 150);
    const trimkv::test::CliRun resumed = run_cli(with_resume(out));
    CAPTURE(resumed.err);
    REQUIRE(resumed.code == 0);
    REQUIRE(steps_of(resumed.out).front().first == done.back().first + 1);  // nothing lost
    REQUIRE(trimkv::test::read_bytes(out) == want);
  }
  SECTION("kill -9: at most one checkpoint interval lost, then --resume") {
    const std::string out = dir.file("kill.safetensors");
    const auto r = run_cli_signalled(args(out), "", SIGKILL, [](const std::string& o, const std::string&) {
      return o.find("\"step\":12,") != std::string::npos;
    });
    CAPTURE(r.out, r.err);
    REQUIRE(r.term_signal == SIGKILL);
    const auto done = steps_of(r.out);
    REQUIRE(!done.empty());
    int64_t last_checkpoint = 0;
    for (const auto& [step, checkpointed] : done)
      if (checkpointed) last_checkpoint = step;
    const trimkv::test::CliRun resumed = run_cli(with_resume(out));
    CAPTURE(resumed.err);
    REQUIRE(resumed.code == 0);
    const int64_t first = steps_of(resumed.out).front().first;
    // Resumed from the last complete checkpoint (one step each here): the kill can cut a checkpoint
    // being written (never read half: resume at the last seen one + 1), or fall after a checkpoint
    // is complete and before its step's line (which reports it) is out: resume at + 2.
    REQUIRE(first >= last_checkpoint);
    REQUIRE(first <= last_checkpoint + 2);
    REQUIRE(trimkv::test::read_bytes(out) == want);
  }
}

TEST_CASE("Ctrl-C stops trimkv eval-sweep between or within cells; a rerun resumes to the uninterrupted table",
          "[cli][signal][eval]") {
  trimkv::test::ScratchDir dir("sigint-sweep");
  REQUIRE(run_cli({"make-world", "--out", dir.path(), "--n", "6", "--seed", "5", "--split", "test", "--max-images", "3",
                   "--max-turns", "3", "--quiet"})
              .code == 0);
  const std::string model = trimkv::test::data_dir() + "/vlm/smolvlm";
  auto args = [&](const std::string& out) {
    return std::vector<std::string>{"eval-sweep", "--model", model, "--data", dir.file("test.jsonl"), "--policies",
                                    "streamingllm,h2o,random", "--budgets", "0.25,0.5,64", "--out", out,
                                    "--max-new-tokens", "4", "--threads", "1"};
  };
  // The signal goes once the first cell (the full cache) is written.
  const auto r = run_cli_signalled(args(dir.file("cut")), "", SIGINT, [](const std::string&, const std::string& err) {
    return err.find("eval-sweep: full full") != std::string::npos;
  });
  CAPTURE(r.out, r.err, r.ms_after_signal);
  REQUIRE(r.code == 130);
  REQUIRE_THAT(r.err, Catch::Contains("cancelled; the finished cells are kept"));
  CHECK(r.ms_after_signal < 1000);  // within the turn in flight
  // Only whole rows were kept: the header, the full cache, perhaps a few more, not all ten.
  const std::string cut = trimkv::test::read_bytes(dir.file("cut/sweep.csv"));
  const auto n_cut = std::count(cut.begin(), cut.end(), '\n');
  CHECK(n_cut >= 2);
  CHECK(n_cut < 11);
  CHECK(cut.back() == '\n');

  const auto resumed = run_cli(args(dir.file("cut")));
  REQUIRE(resumed.code == 0);
  CHECK_THAT(resumed.out, Catch::Contains(std::to_string(11 - n_cut) + " computed now"));
  const auto whole = run_cli(args(dir.file("whole")));
  REQUIRE(whole.code == 0);
  // The same table, cell for cell, but the seconds column.
  auto without_seconds = [](const std::string& csv) {
    std::vector<std::string> rows;
    std::istringstream in(csv);
    for (std::string line; std::getline(in, line);) rows.push_back(line.substr(0, line.rfind(',')));
    std::sort(rows.begin(), rows.end());
    return rows;
  };
  CHECK(without_seconds(trimkv::test::read_bytes(dir.file("cut/sweep.csv"))) ==
        without_seconds(trimkv::test::read_bytes(dir.file("whole/sweep.csv"))));
}

TEST_CASE("no thread that computes takes Ctrl-C or SIGTERM: one watcher thread waits for them, no handler runs",
          "[cli][signal]") {
  // A signal handler runs on the interrupted thread's stack, and oneDNN's JIT sgemm (Debian's
  // libdnnl) points the stack pointer into the heap while it runs: a Ctrl-C landing there
  // corrupted the heap (eval-sweep stopped mid-turn aborted in 1-3% of runs). So every thread of a
  // running trimkv blocks SIGINT and SIGTERM but the watcher waiting in sigwait, and neither
  // signal has a handler. Seen from /proc while eval-sweep computes on two threads, after its
  // first figure (Qt's threads came and went).
  trimkv::test::ScratchDir dir("signal-threads");
  REQUIRE(run_cli({"make-world", "--out", dir.path(), "--n", "4", "--seed", "5", "--split", "test", "--quiet"}).code ==
          0);
  const std::vector<std::string> args = {"eval-sweep", "--model", trimkv::test::data_dir() + "/vlm/smolvlm", "--data",
                                         dir.file("test.jsonl"), "--policies", "streamingllm,h2o", "--budgets",
                                         "0.25,0.5", "--max-new-tokens", "4",
                                         "--threads", "2"};
  auto hex_field = [](const std::string& status, const std::string& name) {
    const size_t at = status.find("\n" + name + ":");
    REQUIRE(at != std::string::npos);
    return std::stoull(status.substr(at + name.size() + 2), nullptr, 16);
  };
  const uint64_t int_term = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
  for (const int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    std::vector<std::string> run_args = args;
    run_args.insert(run_args.end(), {"--out", dir.file("sweep-" + std::to_string(sig))});
    std::vector<std::string> open_threads;  // names of the threads that do not block them
    size_t n_threads = 0;
    uint64_t caught = ~0ull;
    const auto r = run_cli_signalled(
        run_args, "", sig, [](const std::string&, const std::string& err) { return err.find("eval-sweep: full full") != std::string::npos; },
        [&](pid_t pid) {
          const std::string task = "/proc/" + std::to_string(pid) + "/task";
          for (const auto& t : std::filesystem::directory_iterator(task)) {
            const std::string status = "\n" + trimkv::test::read_bytes(t.path().string() + "/status");
            ++n_threads;
            caught &= hex_field(status, "SigCgt");  // per process: the same in every thread
            if ((hex_field(status, "SigBlk") & int_term) != int_term) {
              std::string name = trimkv::test::read_bytes(t.path().string() + "/comm");
              open_threads.push_back(name.substr(0, name.find('\n')));
            }
          }
        });
    CAPTURE(r.err, n_threads, open_threads);
    CHECK(n_threads >= 3);  // main, the watcher, at least one compute worker
    CHECK(open_threads == std::vector<std::string>{"trimkv-signals"});
    CHECK((caught & int_term) == 0);  // no handler for either
    if (sig == SIGINT) {
      CHECK(r.code == 130);  // stopped between cells, what was finished kept
      CHECK_THAT(r.err, Catch::Contains("cancelled; the finished cells are kept"));
    } else {
      CHECK(r.term_signal == SIGTERM);  // nothing registered for it: it ends the program as before
    }
  }
}
