// The synthetic visual world (issue 6): scenes of coloured shapes, question/answer conversations
// over one or more images, and the JSONL + PNG files the demo model is trained and evaluated on.
//
// Determinism: a conversation is a pure function of (seed, split, index, WorldOptions); the
// random numbers come from std::mt19937_64 with hand-written distributions (world/rng.h), the
// shapes' vertices from constant tables, the drawing from OpenCV's fixed-point rasteriser and
// the PNG bytes from stb_image_write, so the same arguments give byte-identical files (the
// JSONL everywhere; the pixels wherever OpenCV's anti-aliased fill is the same, i.e. the same
// OpenCV major version).
//
// Coordinates: pixel (x, y) has its centre at integer (x, y); the image spans [-0.5, S - 0.5].
// Object centres are multiples of 1/4 pixel.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trimkv::vision::world {

enum class Shape : uint8_t { Circle, Square, Triangle, Star };
enum class Color : uint8_t { Red, Green, Blue, Yellow, Purple, Orange };
enum class ObjectSize : uint8_t { Small, Large };
enum class Background : uint8_t { Plain, Noise, Gradient };
enum class Split : uint8_t { Train, Val, Test };

// The image placeholder of turn texts (the same as core's kImagePlaceholder).
inline constexpr const char* kImageToken = "<image>";

inline constexpr int kNumShapes = 4;
inline constexpr int kNumColors = 6;
inline constexpr int kNumSizes = 2;

const char* shape_name(Shape shape);     // "circle"
const char* shape_plural(Shape shape);   // "circles"
const char* color_name(Color color);     // "red"
const char* size_name(ObjectSize size);  // "small" / "large"
const char* background_name(Background background);  // "plain" / "noise" / "gradient"
const char* split_name(Split split);     // "train" / "val" / "test"
std::array<uint8_t, 3> color_rgb(Color color);  // the fixed fill colour (R, G, B)
// "train" | "val" | "test" (also "validation"); Error{Input} otherwise.
Split parse_split(const std::string& name);

// Limits of the options (the CLI checks against them and names its option).
inline constexpr int kMinImageSize = 64;   // smaller images make the small objects < 14 px
inline constexpr int kMaxImageSize = 1024;
inline constexpr int kMaxImagesLimit = 8;  // images per conversation
inline constexpr int kMaxTurnsLimit = 6;   // user turns per conversation
inline constexpr int kMaxObjectsLimit = 6; // objects per image
inline constexpr uint64_t kMaxSeed = (uint64_t{1} << 62) - 1;  // see split_seed()

struct WorldOptions {
  int image_size = 96;   // square images, kMinImageSize..kMaxImageSize
  int max_images = 8;    // images per conversation: uniform in 1..max_images
  int max_turns = 6;     // user turns per conversation: uniform in 1..max_turns
  int max_objects = 6;   // objects per image: uniform in 1..max_objects
};
// Error{Input} naming the field ("image_size", ...) and its allowed range.
void validate(const WorldOptions& options);

// Nominal radius r of an object size for an image of side `image_size` (a multiple of 1/4 px):
// small 0.11 S, large 0.16 S (10.5 and 15.25 px at 96: circles 21 and 31 px wide, i.e. 2.6 and
// 3.8 patches of 8 px; see shared/NOTES-demo-training.md). Shapes are drawn inside a bounding
// circle of radius r * k: circle k = 1, square (side 1.72 r) 1.216, triangle (equilateral,
// apex up, centroid at the centre) 1.35, star (5 points, inner radius half the outer) 1.3.
double nominal_radius(ObjectSize size, int image_size);
double bounding_factor(Shape shape);
// Smallest gap between two objects' bounding circles: max(2, 0.03 S) px.
double object_gap(int image_size);
// An object's centre must be at least this far from the image's midlines for a "Where is"
// question (max(2, 0.04 S) px) and two centres this far apart horizontally for "left of".
double position_margin(int image_size);

struct Object {
  Shape shape = Shape::Circle;
  Color color = Color::Red;
  ObjectSize size = ObjectSize::Small;
  double cx = 0, cy = 0;        // centre (a circle's centre, a polygon's centroid)
  double radius = 0;            // bounding-circle radius = nominal_radius * bounding_factor
  std::array<int, 4> bbox{};    // [x0, y0, x1, y1]: inclusive pixel bounds of the drawn shape
};

struct Scene {
  int image_size = 96;
  Background background = Background::Plain;
  std::array<uint8_t, 3> bg_rgb{};   // plain colour; noise mean; gradient start
  std::array<uint8_t, 3> bg_rgb2{};  // gradient end (equal to bg_rgb otherwise)
  bool gradient_vertical = false;    // gradient along y (else along x)
  uint64_t texture_seed = 0;         // the noise texture's stream
  std::vector<Object> objects;       // 1..max_objects, pairwise non-overlapping
};

// RGB8 pixels of the scene, row-major [image_size, image_size, 3]; a pure function of `scene`.
std::vector<uint8_t> render_scene(const Scene& scene);

// The vertices of a polygonal object (square, triangle, star) in pixel coordinates, in drawing
// order; empty for a circle.
std::vector<std::array<double, 2>> object_polygon(const Object& object);

// An attribute filter a question names ("the red square": colour and shape; "the squares": shape
// only); -1 = any. The objects of a turn's `about` images that pass it are what the answer is
// read from (a training aid: it is not written to the JSONL files).
struct Subject {
  int color = -1;
  int shape = -1;
  bool matches(const Object& o) const {
    return (color < 0 || color == static_cast<int>(o.color)) && (shape < 0 || shape == static_cast<int>(o.shape));
  }
};

struct Turn {
  std::string text;    // the user's text: "Image k:<image>" per image it shows, then the question
  std::string answer;  // one lowercase word, a digit, "top left"-style, or "image {k}"
  std::string type;    // question type, e.g. "color_of_shape", "in_image_count_shape", "more_shape"
  std::vector<int> new_images;  // 0-based indices (into Conversation::scenes) shown in this turn
  std::vector<int> about;       // 0-based images the answer depends on
  std::vector<Subject> subjects;  // what the question names, in order (empty for "describe")
};

struct Conversation {
  std::string id;
  std::vector<Scene> scenes;  // in order of appearance: image k (1-based) is scenes[k - 1]
  std::vector<Turn> turns;
};

// The label written before the placeholder of image k (0-based): "Image {k+1}:".
std::string image_label(int k);

// The seed of a split's stream: 4 * seed + split, injective for seed <= kMaxSeed, so the seeds
// of different splits never coincide, whatever seeds are passed for each split.
uint64_t split_seed(uint64_t seed, Split split);

// Conversation `index` of the split. Error{Input} for bad options or seed > kMaxSeed.
Conversation make_conversation(uint64_t seed, Split split, int64_t index, const WorldOptions& options);

// Training-only additions to a conversation (the demo model's recipe): after its turns, up to
// max_extra_turns more (uniform count), each a "Describe image k." turn with probability
// describe_probability (answer: describe_scene) or a question drawn as for a turn that shows no
// new image.
struct TrainingExtras {
  int max_extra_turns = 0;
  double describe_probability = 0.0;
};
// make_conversation(seed, Train, index, options) plus the extras, drawn from a stream of their
// own (the base turns are exactly make_conversation's).
Conversation make_training_conversation(uint64_t seed, int64_t index, const WorldOptions& options,
                                        const TrainingExtras& extras);

// Every object of the scene in reading order (by centre: top to bottom, then left to right), as
// "{size} {color} {shape} {top|bottom} {left|right}" joined by ", " (the quadrant of the centre).
std::string describe_scene(const Scene& scene);

// The question types (for documentation, tests and evaluation breakdowns).
const std::vector<std::string>& question_types();

// One JSONL line (no newline): {"id", "images", "turns": [{"text", "answer", "type", "about"}],
// "scenes": [{"background", ..., "objects": [{"shape", "color", "size", "center", "radius",
// "bbox"}]}]}. `image_paths` are the images' paths relative to the JSONL file.
std::string conversation_json(const Conversation& conversation, const std::vector<std::string>& image_paths);

struct WorldFiles {
  std::string jsonl;        // out_dir/{split}.jsonl
  std::string meta;         // out_dir/{split}.meta.json: generator, seed, options, counts
  int64_t n_conversations = 0, n_images = 0, n_turns = 0;
};
using WorldProgress = std::function<void(int64_t done, int64_t total)>;

// Writes n conversations: out_dir/{split}.jsonl (one conversation a line) and their PNGs under
// out_dir/images/{split}/ ("{index:06}_{k}.png", k 1-based). Creates out_dir. Error{Input} for
// n <= 0 or bad options, Error{Io} naming the folder or file that cannot be written.
WorldFiles write_world(const std::string& out_dir, Split split, uint64_t seed, int64_t n,
                       const WorldOptions& options, const WorldProgress& progress = {});

// --- text for tokenizer training ---------------------------------------------------------------

// The SmolVLM chat template (kSmolVlmChatTemplate, which the demo model ships) rendered on
// question/answer turns, as the model sees them: "<|im_start|>" once, then per turn
// "User:" (": " unless the text starts with "<image>") + text + "<end_of_utterance>\n" +
// "Assistant: " + answer + "<end_of_utterance>\n".
std::string chat_text(const std::vector<std::pair<std::string, std::string>>& turns);

// One chat_text() per line of a world JSONL file (lines with "turns"); a line that is a JSON
// object with a "text" string contributes that text. Error{Io} for a missing file, Error{Format}
// naming the file and line for a malformed one.
std::vector<std::string> chat_texts_from_jsonl(const std::string& path);

}  // namespace trimkv::vision::world
