// The synthetic visual world (issue 6): scenes of coloured shapes, question/answer conversations
// over one or more images, and the JSONL + PNG files the demo model is trained and evaluated on.
//
// Determinism: a conversation is a pure function of (seed, split, index, WorldOptions); the
// random numbers come from std::mt19937_64 with hand-written distributions (trimkv/core/portable_rng.h), the
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
#include <optional>
#include <string>
#include <vector>

namespace trimkv::vision::world {

enum class Shape : uint8_t { Circle, Square, Triangle, Star };
enum class Color : uint8_t { Red, Green, Blue, Yellow, Purple, Orange };
enum class ObjectSize : uint8_t { Small, Large };
enum class Background : uint8_t { Plain, Noise, Gradient, Texture };
// How a scene is drawn: OpenCV's fixed-point rasteriser (cv::circle / fillPoly / polylines), or
// our own supersampled coverage fill (4x4 samples a pixel when anti-aliased, the pixel centre
// when not). Two independent ways to draw, so that the model does not learn one renderer's edges.
enum class Renderer : uint8_t { OpenCv, Supersample };
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
const char* background_name(Background background);  // "plain" / "noise" / "gradient" / "texture"
const char* renderer_name(Renderer renderer);         // "opencv" / "supersample"
const char* split_name(Split split);     // "train" / "val" / "test"
// "train" | "val" | "test" (also "validation"); Error{Input} otherwise.
Split parse_split(const std::string& name);

// The colours a name covers, in HSV (hue in degrees, saturation and value in [0, 1]); each
// object's fill is drawn uniformly from its name's box. The hue ranges are far enough apart that
// every colour keeps its name (red 350-10, orange 22-38, yellow 48-60, green 95-150, blue
// 205-245, purple 265-300), and every fill is saturated (>= 0.6) while backgrounds are nearly
// grey (saturation <= 0.12), so an object never disappears into its background.
struct ColorRange {
  double hue_lo, hue_hi;  // hue_lo > hue_hi wraps through 0 (red)
  double sat_lo, sat_hi;
  double val_lo, val_hi;
};
ColorRange color_range(Color color);
// HSV (h in degrees, any value; s, v in [0, 1]) to RGB8, rounded: plain arithmetic, the same on
// every platform.
std::array<uint8_t, 3> hsv_to_rgb(double h, double s, double v);

// Limits of the options (the CLI checks against them and names its option).
inline constexpr int kMinImageSize = 32;
inline constexpr int kMaxImageSize = 1024;
inline constexpr int kMaxImagesLimit = 8;  // images per conversation
inline constexpr int kMaxTurnsLimit = 6;   // user turns per conversation
inline constexpr int kMaxObjectsLimit = 6; // objects per image
inline constexpr uint64_t kMaxSeed = (uint64_t{1} << 62) - 1;  // see split_seed()

struct WorldOptions {
  // Square images whose side is drawn per image, log-uniformly in [min_image_size,
  // max_image_size] (kMinImageSize..kMaxImageSize); the model's processor resizes them, as it
  // does any user image. min = max gives one size.
  int min_image_size = 48;
  int max_image_size = 400;
  int max_images = 8;    // images per conversation: uniform in 1..max_images
  int max_turns = 6;     // user turns per conversation: uniform in 1..max_turns
  int min_objects = 1;   // objects per image: uniform in min_objects..max_objects
  int max_objects = 6;
};
// Error{Input} naming the field ("min_image_size", ...) and its allowed range.
void validate(const WorldOptions& options);

// The range of an object's bounding-circle radius for an image of side `image_size`: the one
// that makes the shape (unrotated) 8-18% of the side wide when small, 22-40% when large, and at
// least 4 px. Each object's radius is drawn uniformly from its range, on the 1/4-pixel grid.
std::array<double, 2> radius_range(Shape shape, ObjectSize size, int image_size);
// The width of a shape (unrotated) whose bounding-circle radius is `radius`.
double shape_width(Shape shape, double radius);
// Objects narrower than this carry no outline: a 1-px outline on a 5-px star leaves no fill to
// read its colour from.
inline constexpr double kMinOutlinedWidth = 14.0;
// Shapes are drawn inside their bounding circle: a circle fills it; a square's corners, a
// triangle's (equilateral, apex up before rotation, centroid at the centre) and a star's outer
// points (5 points, inner radius half the outer) lie on it. bounding_factor() is the ratio of
// that radius to the shape's nominal radius (square half-side 0.86 / 1.216 of it, ...).
double bounding_factor(Shape shape);
// Smallest gap between two objects' bounding circles: max(2, 0.03 S) px.
double object_gap(int image_size);
// An object's centre must be at least this far from the image's midlines for a "Where is"
// question (max(2, 0.04 S) px) and two centres this far apart horizontally for "left of".
double position_margin(int image_size);
// Polygon rotations are multiples of kRotationStep degrees within +-kMaxRotationSteps steps.
inline constexpr double kRotationStep = 2.5;
inline constexpr int kMaxRotationSteps = 8;  // +-20 degrees

struct Object {
  Shape shape = Shape::Circle;
  Color color = Color::Red;
  ObjectSize size = ObjectSize::Small;
  std::array<uint8_t, 3> rgb{};  // the fill, drawn from color_range(color)
  double cx = 0, cy = 0;        // centre (a circle's centre, a polygon's centroid)
  double radius = 0;            // bounding-circle radius
  int rotation = 0;             // polygons: kRotationStep degrees a step, clockwise on screen
  int outline = 0;              // outline width in px (0: none)
  std::array<uint8_t, 3> outline_rgb{};
  std::array<int, 4> bbox{};    // [x0, y0, x1, y1]: inclusive pixel bounds of the drawn shape
};

struct Scene {
  int image_size = 96;
  Background background = Background::Plain;
  std::array<uint8_t, 3> bg_rgb{};   // plain colour; noise and texture mean; gradient start
  std::array<uint8_t, 3> bg_rgb2{};  // gradient end (equal to bg_rgb otherwise)
  int gradient_direction = 0;        // gradient: 22.5 degrees a step (0: left to right, 4: top down)
  int noise_amplitude = 0;           // noise / texture: +- grey levels
  uint64_t texture_seed = 0;         // the noise / texture stream
  Renderer renderer = Renderer::OpenCv;
  bool antialias = true;
  std::vector<Object> objects;       // min_objects..max_objects, pairwise non-overlapping
};

// RGB8 pixels of the scene, row-major [image_size, image_size, 3]; a pure function of `scene`.
std::vector<uint8_t> render_scene(const Scene& scene);

// The vertices of a polygonal object (square, triangle, star) in pixel coordinates, in drawing
// order, rotated; empty for a circle.
std::vector<std::array<double, 2>> object_polygon(const Object& object);
// Whether the drawn object covers point (x, y) (circle: the disc; polygons: even-odd rule).
bool object_covers(const Object& object, double x, double y);
// The same with the object's polygon (object_polygon(object)) computed once by the caller.
bool shape_covers(const Object& object, const std::vector<std::array<double, 2>>& polygon, double x, double y);

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
  std::string text;    // the user's text: "<image>" per image it shows (sometimes labelled), then the question
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

// The label of image k (0-based): "Image {k+1}:". The demo model's chat template writes it
// before each image; users' texts carry bare placeholders (sometimes a label of their own).
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

// The demo model's chat template (kDemoChatTemplate) rendered on question/answer turns, as the
// model sees them: "<|im_start|>" once, then per turn "User: " + text (each "<image>" as
// "Image k:<image>") + "<end_of_utterance>\n" + "Assistant: " + answer + "<end_of_utterance>\n".
std::string chat_text(const std::vector<std::pair<std::string, std::string>>& turns);

// One chat_text() per line of a world JSONL file (lines with "turns"); a line that is a JSON
// object with a "text" string contributes that text. Error{Io} for a missing file, Error{Format}
// naming the file and line for a malformed one.
std::vector<std::string> chat_texts_from_jsonl(const std::string& path);

// A question of the world recognised in what a user typed: its type (a question_types() entry,
// or "describe" for "Describe image k.") and the image it names (1-based; 0 when none).
struct ParsedQuestion {
  std::string type;
  int image = 0;
};
// The question `text` asks, if it is one of the world's in any wording the world uses (every
// paraphrase; "In image k," / "Looking at image k," / "For image k,"; any letter case; the final
// "?" or "." missing, spaced or repeated; <image> placeholders and extra spaces ignored);
// nullopt for anything else ("How many objects are there?", "Tell me a story").
std::optional<ParsedQuestion> parse_question(const std::string& text);

}  // namespace trimkv::vision::world
