// Runs the `trimkv` binary as a user would (arguments, optional standard input) and checks
// user-error output. Shared by the CLI suites.
#pragma once
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
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

}  // namespace trimkv::test
