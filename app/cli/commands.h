// The `trimkv` subcommands. Each parses its own options (argv[first..]) and returns an exit code;
// errors propagate as exceptions to main(), which prints them.
#pragma once

namespace trimkv::cli {

int cmd_info(int argc, char** argv, int first);
int cmd_tokenize(int argc, char** argv, int first);
int cmd_generate(int argc, char** argv, int first);
int cmd_chat(int argc, char** argv, int first);
int cmd_train_gates(int argc, char** argv, int first);
int cmd_make_world(int argc, char** argv, int first);
int cmd_make_tasks(int argc, char** argv, int first);
int cmd_train_tokenizer(int argc, char** argv, int first);
int cmd_eval(int argc, char** argv, int first);
int cmd_eval_sweep(int argc, char** argv, int first);
int cmd_train_demo(int argc, char** argv, int first);

}  // namespace trimkv::cli
