// Plain value types of a multi-turn, multimodal conversation (no tensors): what the CLI and GUI
// pass in and get back. Images are referred to by file path here; decoding them is vision/'s job
// (through the Session's TurnEncoder).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trimkv {

// The placeholder that marks where an image goes in a prompt (every family; each family expands
// it to its own tokens).
inline constexpr const char* kImagePlaceholder = "<image>";

// One item of a message, in order: a piece of text or an image file.
struct ContentPart {
  enum class Kind { Text, Image };
  Kind kind = Kind::Text;
  std::string text;  // Kind::Text
  std::string path;  // Kind::Image

  static ContentPart text_part(std::string t) { return {Kind::Text, std::move(t), {}}; }
  static ContentPart image_part(std::string p) { return {Kind::Image, {}, std::move(p)}; }
};

struct Message {
  std::string role;  // user | assistant | system
  std::vector<ContentPart> content;
};

// How many `marker`s (kImagePlaceholder unless given) `text` holds.
size_t count_image_placeholders(const std::string& text, const std::string& marker = kImagePlaceholder);

// `text` with its k-th `marker` (kImagePlaceholder unless a family's template writes its own,
// e.g. <|image_pad|>) replaced by expansions[k]. Error{Unsupported} naming `what` (e.g. the chat
// template) when the numbers of markers and expansions differ.
std::string expand_image_placeholders(const std::string& text, const std::vector<std::string>& expansions,
                                      const std::string& what, const std::string& marker = kImagePlaceholder);

// Error{Input} when a text part of `content` holds one of a family's image `markers` (typed
// by a user: no image part would fill it; images go as their own parts).
void check_no_image_markers(const std::vector<ContentPart>& content, const std::vector<std::string>& markers);

// `text` with kImagePlaceholder markers and the images that fill them, in order, as content
// parts; when the text has no placeholder the images go first. Error{Input} when the text has
// placeholders but their number differs from the number of images.
std::vector<ContentPart> content_from_prompt(const std::string& text,
                                             const std::vector<std::string>& images);

// Reads a conversation file: Hugging Face messages, as {"messages": [...]} (what `trimkv chat`'s
// /save writes) or a bare list; each {"role", "content"} with content a string or a list of
// {"type": "text", "text"} / {"type": "image", "path" (or "image")} parts, image paths relative
// to the file. Error{Io} / Error{Format} naming the file and the message.
std::vector<Message> read_messages_file(const std::string& path);

// An image of the conversation as the model saw it: enough to draw every one of its KV entries
// back onto the picture. Each tile holds grid_rows x grid_cols visual tokens. A visual token with
// (tile t, patch row r, patch col c) of a split image covers, in the resized image, the square
// of side tile_size / grid_side pixels at
//   x = (t % tile_cols) * tile_size + c * tile_size / grid_side,  y likewise with rows
// for t < tile_rows * tile_cols; the last tile (the global image, or the only one when the image
// was not split) covers the whole image, squeezed to tile_size x tile_size, cut into
// grid_rows x grid_cols cells. tile_size 0: an any-resolution image (Qwen-VL), one grid of
// grid_rows x grid_cols merged patches over the resized image at its own aspect ratio.
struct ImageRecord {
  int16_t image_id = -1;
  std::string source;                          // file path
  int width = 0, height = 0;                   // as decoded (EXIF orientation applied)
  int resized_width = 0, resized_height = 0;   // what the tiles were cut from
  int tile_rows = 0, tile_cols = 0;            // 0, 0: not split (one tile)
  int n_tiles = 0;                             // tile_rows * tile_cols + 1, or 1
  int tile_size = 0;                           // pixels per tile side; 0: not tiled
  int grid_side = 0;                           // visual tokens per tile side (square tiles)
  int grid_rows = 0, grid_cols = 0;            // visual tokens per tile: rows x columns
  int64_t n_image_tokens = 0;                  // positions of modality image
};

}  // namespace trimkv
