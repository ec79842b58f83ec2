// Conversation files: the transcript as JSON, with its images copied beside it so the file can be
// moved or shared as one folder. The shape is ChatEngine::transcript_json's (Hugging Face
// messages) plus a format tag:
//   {"format": "trimkv-conversation", "version": 1, "model": "<model folder>",
//    "messages": [{"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]},
//                 {"role": "user", "content": [{"type": "image", "path": "chat-images/9f2c…-a.png"},
//                                               {"type": "text", "text": "What is this?"}]},
//                 {"role": "assistant", "content": [{"type": "text", "text": "A star."}]}]}
// Image paths are relative to the JSON file's folder (absolute ones are accepted when reading,
// so ChatEngine::save_transcript's files load too).
#pragma once
#include <QString>
#include <vector>

#include "trimkv/core/conversation_types.h"

// Writes `path` and copies every image into "<stem>-images/" beside it, each named by a hash of
// its content and its file name ("<16 hex>-a.png"), so the folder is consistent at every moment:
// the copies are made first, then the JSON replaces the old one in one rename (atomic_file.h),
// then copies no save refers to any more are removed. Error{Io} naming the file that cannot be
// read or written (the previous file, if any, is then untouched).
void saveConversationFile(const QString& path, const std::vector<trimkv::Message>& messages,
                          const QString& modelDir);
// Reads a file written by saveConversationFile (or ChatEngine::save_transcript). Error{Io} when it
// cannot be read, Error{Format} naming the file and the field that is malformed.
std::vector<trimkv::Message> loadConversationFile(const QString& path);
