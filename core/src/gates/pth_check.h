// Checks a torch.save file (a zip holding <name>/data.pkl and its tensors' records) before
// LibTorch's reader sees it: LibTorch's zip reader (miniz) and unpickler trust the bytes, and a
// corrupt or hostile file made them read freed or unowned memory (found by the gates fuzz target).
// Every structure they walk is bounds-checked here first; anything else is refused by name.
#pragma once
#include <string>
#include <vector>

namespace trimkv {

// Error{Format} naming `path` and the problem unless `bytes` is a zip whose end-of-directory
// record (zip64 included), central directory and local headers agree and lie inside the file,
// with stored (uncompressed, unencrypted) entries under one top folder, unique names, exactly one
// <folder>/data.pkl, and that pickle uses only the opcodes a state dict needs (protocol 2-4), with
// in-bounds arguments, memo references to entries already stored, no stack underflow, and a STOP.
void check_torch_save_file(const std::vector<char>& bytes, const std::string& path);

}  // namespace trimkv
