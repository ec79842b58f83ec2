// Telling whether a checkpoint's files have changed without reading them whole: a sample hash of
// each file (its size, and FNV-1a 64 of its first 64 KiB and of 4 KiB at 16 evenly spaced
// places). The weight cache keeps one per file of the checkpoint it was made from; eval-sweep
// keeps one for the model whose cells a folder holds.
#pragma once
#include <string>

namespace trimkv {

// The hex FNV-1a 64 sample hash of the file at `path` (see above). Error{Io} naming the file when
// it cannot be read.
std::string file_sample_hash(const std::string& path);

// The files of checkpoint `model` that hold its tensors (a folder: its *.safetensors and *.gguf
// files, retention gates included; a file: itself), as one hex hash of their names, sizes and
// sample hashes. It changes when a checkpoint is retrained or replaced in place, not when its
// files are only copied or touched. "" for a path that does not exist.
std::string checkpoint_fingerprint(const std::string& model);

}  // namespace trimkv
