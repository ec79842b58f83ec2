// Runs the `trimkv` binary as a user would (arguments, optional standard input) and checks
// user-error output. Shared by the CLI suites.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace trimkv::test {

struct CliRun {
  int code = -1;  // exit status; -1 when the process did not exit normally (a crash)
  std::string out, err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline CliRun run_cli(const std::vector<std::string>& args, const std::string& input = "") {
  ScratchDir dir("cli");
  write_text(dir.file("in"), input);
  std::string cmd = shell_quote(TRIMKV_CLI_PATH);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>" + shell_quote(dir.file("err")) + " <" + shell_quote(dir.file("in"));
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_bytes(dir.file("err"));
  return r;
}

// A user error: non-zero exit, a message naming `what`, no crash output.
inline void require_clean_error(const CliRun& r, const std::string& what) {
  CAPTURE(r.out, r.err);
  REQUIRE(r.code != 0);
  REQUIRE(r.code != -1);
  REQUIRE_THAT(r.err, Catch::Contains(what));
  REQUIRE_THAT(r.err, !Catch::Contains("terminate called") && !Catch::Contains("Exception raised from"));
}

// A run that gets a signal: `trimkv args` starts (stdin from `input`), and once `ready(out, err)`
// holds (polled every 10 ms, at most 60 s), `before_signal(pid)` looks at the running process (if
// given) and `sig` is sent; the process must then exit within 20 s (else it is killed and the
// test fails). ms_after_signal: from the signal to the exit.
struct SignalledRun {
  int code = -1;           // exit status; -1 when it did not exit normally
  int term_signal = 0;     // the signal that ended it, if one did
  std::string out, err;
  double ms_after_signal = -1;
};

inline SignalledRun run_cli_signalled(const std::vector<std::string>& args, const std::string& input, int sig,
                                      const std::function<bool(const std::string&, const std::string&)>& ready,
                                      const std::function<void(pid_t)>& before_signal = {}) {
  ScratchDir dir("cli-signal");
  write_text(dir.file("in"), input);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int in = open(dir.file("in").c_str(), O_RDONLY);
    const int out = open(dir.file("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(dir.file("err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<std::string> a = {TRIMKV_CLI_PATH};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& x : a) argv.push_back(x.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  using Clock = std::chrono::steady_clock;
  SignalledRun r;
  int status = 0;
  bool exited = false;
  const auto start = Clock::now();
  while (Clock::now() - start < std::chrono::seconds(60)) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (ready(read_bytes(dir.file("out")), read_bytes(dir.file("err")))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto signalled = Clock::now();
  if (!exited) {
    if (before_signal) before_signal(pid);
    kill(pid, sig);
    while (!exited && Clock::now() - signalled < std::chrono::seconds(20)) {
      if (waitpid(pid, &status, WNOHANG) == pid) exited = true;
      else std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    r.ms_after_signal = std::chrono::duration<double, std::milli>(Clock::now() - signalled).count();
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  r.out = read_bytes(dir.file("out"));
  r.err = read_bytes(dir.file("err"));
  CAPTURE(r.out, r.err);
  REQUIRE(exited);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return r;
}

}  // namespace trimkv::test
