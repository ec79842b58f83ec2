// Replacing a file without ever leaving a half-written one: what every "save" of this program
// (conversations, traces, gates, sweeps, tokenizers, checkpoints) goes through.
#pragma once
#include <string>
#include <string_view>

namespace trimkv {

// Replaces `path` with `bytes`: written to a temporary file beside it, flushed to disk, then
// renamed over it. On any error (a full disk, a file-size limit, no permission, a missing
// folder) the temporary file is removed, a previous `path` is left as it was, and Error{Io}
// names the path and the system's reason ("No space left on device").
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace trimkv
