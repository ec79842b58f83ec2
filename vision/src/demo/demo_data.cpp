// Training data of the demo model: world conversations laid out as the Session lays them out,
// their images as the processor makes them, and the per-token targets of the vision stage.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "demo/demo_internal.h"
#include "trimkv/core/conversation_types.h"
#include "trimkv/core/error.h"

namespace trimkv::vision::demo {

DemoData::DemoData(const Tokenizer& tok, const DemoModelSize& size, const Idefics3ProcessorConfig& proc,
                   bool number_hops, bool count_second_kv_head, double count_weight)
    : m_tok(tok), m_size(size), m_proc(proc), m_number_hops(number_hops),
      m_count_second_kv_head(count_second_kv_head), m_count_weight(count_weight) {
  m_side = size.image_size / size.patch_size / size.scale_factor;
  m_seq = m_side * m_side;
  m_image_id = tok.token_to_id(kImagePlaceholder);
  m_image_edge_id = tok.token_to_id(kIdefics3FakeImageToken);
  m_global_id = tok.token_to_id(kIdefics3GlobalImageToken);
  TRIMKV_CHECK(m_image_id >= 0, Config, "the demo tokenizer lacks '", kImagePlaceholder, "'");
  m_close = tok.encode(demo_chat_format().answer_close({{"user", {ContentPart::text_part("?")}}}), false);
  m_number_ids.assign(world::kMaxImagesLimit + 1, -1);
  for (int k = 1; k <= world::kMaxImagesLimit; ++k)
    if (const std::vector<int32_t> t = tok.encode(std::to_string(k), false); t.size() == 1) m_number_ids[k] = t[0];
}

at::Tensor DemoData::scene_pixels(const world::Scene& scene) const {
  RgbImage img;
  img.width = img.height = scene.image_size;
  img.data = world::render_scene(scene);
  return idefics3_preprocess(img, m_proc).pixels;  // [1, 3, S, S]
}

int64_t DemoData::object_cell(const world::Scene& scene, const world::Object& o) const {
  const double cell = static_cast<double>(scene.image_size) / static_cast<double>(m_side);
  const int64_t col = std::clamp<int64_t>(static_cast<int64_t>(std::floor((o.cx + 0.5) / cell)), 0, m_side - 1);
  const int64_t row = std::clamp<int64_t>(static_cast<int64_t>(std::floor((o.cy + 0.5) / cell)), 0, m_side - 1);
  return row * m_side + col;
}

at::Tensor DemoData::scene_targets(const world::Scene& scene) const {
  at::Tensor t = at::zeros({m_seq, 3}, at::kLong);
  auto acc = t.accessor<int64_t, 2>();
  // The model sees the scene resized to image_size: a token's cell is image_size / side pixels
  // of it, i.e. scene.image_size / side of the scene. Pixel centres are integers, the image
  // spans [-0.5, S - 0.5].
  for (const world::Object& o : scene.objects) {
    const int64_t k = object_cell(scene, o);
    if (acc[k][0] != 0) continue;  // two centres in one cell (rare): the first object keeps it
    acc[k][0] = 1 + static_cast<int64_t>(o.color);
    acc[k][1] = 1 + static_cast<int64_t>(o.shape);
    acc[k][2] = 1 + static_cast<int64_t>(o.size);
  }
  return t;
}

at::Tensor DemoData::scene_patch_targets(const world::Scene& scene) const {
  const int64_t g = m_size.image_size / m_size.patch_size;
  at::Tensor t = at::zeros({g * g, 2}, at::kLong);
  auto acc = t.accessor<int64_t, 2>();
  const double cell = static_cast<double>(scene.image_size) / static_cast<double>(g);
  std::vector<std::vector<std::array<double, 2>>> polygons;
  for (const world::Object& o : scene.objects) polygons.push_back(world::object_polygon(o));
  for (int64_t r = 0; r < g; ++r)
    for (int64_t c = 0; c < g; ++c) {
      const double x = (c + 0.5) * cell - 0.5, y = (r + 0.5) * cell - 0.5;
      for (size_t i = 0; i < scene.objects.size(); ++i)
        if (const world::Object& o = scene.objects[i]; world::shape_covers(o, polygons[i], x, y)) {
          acc[r * g + c][0] = 1 + static_cast<int64_t>(o.color);
          acc[r * g + c][1] = 1 + static_cast<int64_t>(o.shape);
          break;
        }
    }
  return t;
}

void DemoData::add_images(const std::vector<world::Scene>& scenes, Images& images) const {
  for (const world::Scene& s : scenes) {
    images.pixels.push_back(scene_pixels(s));
    images.targets.push_back(scene_targets(s).unsqueeze(0));
    images.patch_targets.push_back(scene_patch_targets(s).unsqueeze(0));
  }
}

void DemoData::finish(Images& images, DemoBatch& batch) {
  if (images.pixels.empty()) return;
  batch.pixels = at::cat(images.pixels, 0);
  batch.aux_targets = at::cat(images.targets, 0);
  batch.patch_targets = at::cat(images.patch_targets, 0);
}

double DemoData::sequence_cost(const DemoSequence& seq) const {
  const DemoModelSize& z = m_size;
  const double h = z.text_hidden, kv = h * z.text_kv_heads / z.text_heads, d = z.vision_hidden;
  const double patches = static_cast<double>(z.image_size / z.patch_size) * (z.image_size / z.patch_size);
  const double per_token = 3.0 * z.text_layers * (h * (2 * h + 2 * kv) + 3 * h * z.text_ffn);
  const double per_pair = 3.0 * z.text_layers * h;  // n^2 / 2 pairs, scores and values
  const double per_image = z.vision_layers * patches * (4 * d * d + 2 * d * z.vision_ffn + 2 * patches * d);
  const double n = static_cast<double>(seq.ids.size());
  return per_token * n + per_pair * n * n + per_image * static_cast<double>(seq.n_images);
}

std::vector<DemoBatch> DemoData::split(const DemoBatch& batch, int n) const {
  TRIMKV_CHECK(n >= 1, Input, "a batch must be split into 1 or more parts, got ", n);
  std::vector<DemoBatch> parts;
  if (batch.seqs.empty()) {  // images only: n even runs
    const int64_t images = batch.pixels.defined() ? batch.pixels.size(0) : 0;
    const int64_t k = std::min<int64_t>(n, images);
    for (int64_t p = 0, first = 0; p < k; ++p) {
      const int64_t last = images * (p + 1) / k;
      DemoBatch part;
      part.pixels = batch.pixels.narrow(0, first, last - first);
      part.aux_targets = batch.aux_targets.narrow(0, first, last - first);
      part.patch_targets = batch.patch_targets.narrow(0, first, last - first);
      parts.push_back(std::move(part));
      first = last;
    }
    return parts;
  }
  const size_t k = std::min(static_cast<size_t>(n), batch.seqs.size());
  std::vector<size_t> order(batch.seqs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<double> cost;
  for (const auto& s : batch.seqs) cost.push_back(sequence_cost(s));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<std::vector<size_t>> members(k);
  std::vector<double> load(k, 0.0);
  for (size_t i : order) {
    const size_t p = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    members[p].push_back(i);
    load[p] += cost[i];
  }
  for (auto& m : members) {
    std::sort(m.begin(), m.end());
    DemoBatch part;
    std::vector<int64_t> images;
    for (size_t i : m) {
      DemoSequence s = batch.seqs[i];
      for (int64_t j = 0; j < s.n_images; ++j) images.push_back(s.first_image + j);
      s.first_image = static_cast<int64_t>(images.size()) - s.n_images;
      part.seqs.push_back(std::move(s));
    }
    if (!images.empty()) {
      const at::Tensor index = at::tensor(images, at::kLong);
      part.pixels = batch.pixels.index_select(0, index);
      part.aux_targets = batch.aux_targets.index_select(0, index);
      part.patch_targets = batch.patch_targets.index_select(0, index);
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

int64_t DemoData::number_position(const DemoSequence& seq, int64_t from, int64_t to, int number) const {
  const int32_t id = number >= 0 && number < static_cast<int>(m_number_ids.size()) ? m_number_ids[number] : -1;
  for (int64_t p = to - 1; id >= 0 && p >= from; --p)
    if (seq.ids[static_cast<size_t>(p)] == id) return p;
  return -1;
}

void DemoData::add_attention_targets(const world::Conversation& conv, const world::Turn& turn, int64_t turn_start,
                                     DemoSequence& seq) const {
  const int64_t end = static_cast<int64_t>(seq.ids.size());
  auto id_at = [&](int64_t p) { return seq.ids[static_cast<size_t>(p)]; };
  auto image_tokens = [&](int img) {
    const auto first = seq.image_pos.begin() + static_cast<std::ptrdiff_t>(img) * m_seq;
    return std::vector<int64_t>(first, first + m_seq);
  };
  // Hop 0: the visual tokens of this turn's images look at their label (the text before the
  // image's markers, back to the previous image or the turn's start).
  for (int img : turn.new_images) {
    int64_t stop = seq.image_pos[static_cast<size_t>(img) * static_cast<size_t>(m_seq)];
    while (stop > turn_start && (id_at(stop - 1) == m_image_edge_id || id_at(stop - 1) == m_global_id)) --stop;
    int64_t start = stop;
    while (start > turn_start && id_at(start - 1) != m_image_edge_id) --start;
    if (start == stop) continue;
    std::vector<int64_t> label(static_cast<size_t>(stop - start));
    std::iota(label.begin(), label.end(), start);
    std::vector<int64_t> number = label;  // with number_hops, the label's digit alone
    if (m_number_hops)
      if (const int64_t p = number_position(seq, start, stop, img + 1); p >= 0) number = {p};
    for (int64_t p : image_tokens(img)) {
      seq.hops[0].rows.push_back(p);
      seq.hops[0].head0.push_back(number);
      seq.hops[0].head1.push_back(label);
    }
  }
  if (turn.subjects.empty()) return;
  // The question: the turn's tokens after its last image.
  int64_t from = turn_start;
  for (int64_t p = end - 1; p >= turn_start; --p)
    if (id_at(p) == m_image_edge_id) {
      from = p + 1;
      break;
    }
  std::vector<int64_t> question(static_cast<size_t>(end - from));
  std::iota(question.begin(), question.end(), from);
  const bool counting = turn.type.find("count") != std::string::npos || turn.type == "total_shape" ||
                        turn.type == "more_shape";
  std::vector<int64_t> anchors;
  for (size_t si = 0; si < turn.subjects.size() && si < 2; ++si) {
    const world::Subject& subject = turn.subjects[si];
    // The word: the shape (singular or plural) if named, else the colour; the first subject's
    // first occurrence, the second's last.
    std::vector<int32_t> words;
    if (subject.shape >= 0) {
      for (const char* w : {world::shape_name(static_cast<world::Shape>(subject.shape)),
                            world::shape_plural(static_cast<world::Shape>(subject.shape))}) {
        const std::vector<int32_t> t = m_tok.encode(std::string(" ") + w, false);
        if (t.size() == 1) words.push_back(t[0]);
      }
    } else if (subject.color >= 0) {
      const std::vector<int32_t> t = m_tok.encode(std::string(" ") + world::color_name(static_cast<world::Color>(subject.color)), false);
      if (t.size() == 1) words.push_back(t[0]);
    }
    int64_t anchor = -1;
    for (int64_t p = from; p < end; ++p)
      if (std::find(words.begin(), words.end(), id_at(p)) != words.end()) {
        anchor = p;
        if (si == 0) break;
      }
    if (anchor < 0) return;
    if (si == 0 && turn.type.rfind("in_image_", 0) == 0) {  // about exactly image k
      seq.asked_rows.push_back(anchor);
      seq.asked_image.push_back(turn.about.front());
    }
    // Hop 2's targets: the cells of the objects the subject matches in the images asked about.
    std::vector<int64_t> cells;
    const world::Object* found = nullptr;  // the last object matched, and its cell in its image
    int64_t found_cell = 0, found_image = 0, n_matching = 0;
    std::vector<int64_t> per_image(turn.about.size(), 0);
    for (size_t ai = 0; ai < turn.about.size(); ++ai) {
      const int img = turn.about[ai];
      for (const world::Object& o : conv.scenes[static_cast<size_t>(img)].objects)
        if (subject.matches(o)) {
          found = &o;
          found_image = img;
          found_cell = object_cell(conv.scenes[static_cast<size_t>(img)], o);
          cells.push_back(seq.image_pos[static_cast<size_t>(img) * static_cast<size_t>(m_seq) +
                                        static_cast<size_t>(found_cell)]);
          ++per_image[ai];
          ++n_matching;
        }
    }
    std::array<int64_t, kFoundFields> t;
    t.fill(DemoSequence::kNoTarget);
    if (turn.type == "more_shape") {
      const auto most = std::max_element(per_image.begin(), per_image.end());
      t[kFoundImage] = turn.about[static_cast<size_t>(most - per_image.begin())];
    } else if (counting) {
      TRIMKV_ASSERT(n_matching <= kMaxCountAnswer, "demo data: a count of ", n_matching, " in ", conv.id);
      t[kFoundCount] = n_matching;
    } else if (n_matching == 1) {
      t[kFoundColor] = static_cast<int64_t>(found->color);
      t[kFoundShape] = static_cast<int64_t>(found->shape);
      t[kFoundRow] = found_cell / m_side;
      t[kFoundCol] = found_cell % m_side;
      t[kFoundImage] = found_image;
    }
    if (counting || n_matching == 1) {
      seq.found_rows.push_back(anchor);
      seq.found.push_back(t);
    }
    Lookup lookup = subject.shape >= 0 ? kLookupShape : kLookupColor;
    if (counting) {
      // Every matching object and the word itself, evenly (what is left on the word tells how
      // many matched; with the mass summed instead, the word would keep it all).
      cells.push_back(anchor);
      lookup = kLookupCount;
    } else if (cells.empty()) {
      for (int img : turn.about) {
        const std::vector<int64_t> tokens = image_tokens(img);
        cells.insert(cells.end(), tokens.begin(), tokens.end());
      }
      lookup = kLookupImage;
    }
    // Hop 1: head 0 looks at the subject's colour word when it names one besides the shape (so
    // that the word knows both), head 1 at the whole question (e.g. "In image k").
    std::vector<int64_t> color_word = question;
    if (subject.shape >= 0 && subject.color >= 0) {
      const std::vector<int32_t> t =
          m_tok.encode(std::string(" ") + world::color_name(static_cast<world::Color>(subject.color)), false);
      for (int64_t p = anchor - 1; t.size() == 1 && p >= from; --p)
        if (id_at(p) == t[0]) {
          color_word = {p};
          break;
        }
    }
    // With number_hops, head 1 looks at the numbers of the images the question names instead.
    std::vector<int64_t> named = question;
    if (m_number_hops && (turn.type.rfind("in_image_", 0) == 0 || turn.type == "more_shape")) {
      std::vector<int64_t> digits;
      for (int img : turn.about)
        if (const int64_t p = number_position(seq, from, end, img + 1); p >= 0) digits.push_back(p);
      if (!digits.empty()) named = digits;
    }
    seq.hops[1].rows.push_back(anchor);
    seq.hops[1].head0.push_back(color_word);
    seq.hops[1].head1.push_back(named);
    seq.hops[2].rows.push_back(anchor);
    seq.hops[2].head0.push_back(cells);
    seq.hops[2].head1.push_back(cells);
    seq.hops[2].counts_on_head2 = m_count_second_kv_head;
    seq.hops[2].count_weight = static_cast<float>(m_count_weight);
    seq.hops[2].lookup.push_back(lookup);
    anchors.push_back(anchor);
  }
  seq.hops[3].rows.push_back(end - 1);
  seq.hops[3].head0.push_back({anchors.front()});
  seq.hops[3].head1.push_back({anchors.back()});
}

DemoSequence DemoData::layout(const world::Conversation& conv, Images& images) const {
  DemoSequence seq;
  seq.first_image = static_cast<int64_t>(images.pixels.size());
  seq.n_images = static_cast<int64_t>(conv.scenes.size());
  seq.n_scene_images = static_cast<int>(conv.scenes.size());
  add_images(conv.scenes, images);
  const std::string image_prompt = idefics3_image_prompt(0, 0, static_cast<int>(m_seq));
  const ChatFormat& format = demo_chat_format();  // what the demo model ships
  std::vector<Message> history;
  for (size_t k = 0; k < conv.turns.size(); ++k) {
    const world::Turn& turn = conv.turns[k];
    const size_t n_images = count_image_placeholders(turn.text);
    const std::vector<ContentPart> content = content_from_prompt(turn.text, std::vector<std::string>(n_images));
    const std::string text = expand_image_placeholders(format.user_text(history, content),
                                                       std::vector<std::string>(n_images, image_prompt),
                                                       "the demo chat template");
    history.push_back({"user", content});
    const int64_t turn_start = static_cast<int64_t>(seq.ids.size());
    for (int32_t id : m_tok.encode(text, false)) {
      if (id == m_image_id) seq.image_pos.push_back(static_cast<int64_t>(seq.ids.size()));
      seq.ids.push_back(id);
    }
    add_attention_targets(conv, turn, turn_start, seq);
    const std::vector<int32_t> answer = m_tok.encode(format.assistant_text(history, turn.answer), false);
    history.push_back({"assistant", {ContentPart::text_part(turn.answer)}});
    TRIMKV_ASSERT(answer.size() > m_close.size(), "demo data: the answer '", turn.answer, "' has no token");
    const size_t n_label = answer.size() - m_close.size() + 1;  // the answer and its end of utterance
    for (size_t i = 0; i < answer.size(); ++i) {
      if (i < n_label) {
        seq.label_pos.push_back(static_cast<int64_t>(seq.ids.size()) - 1);
        seq.label_tgt.push_back(answer[i]);
        seq.label_turn.push_back(static_cast<int32_t>(k));
      }
      seq.ids.push_back(answer[i]);
    }
    seq.turn_type.push_back(turn.type);
  }
  TRIMKV_ASSERT(static_cast<int64_t>(seq.image_pos.size()) == seq.n_images * m_seq,
                "demo data: conversation ", conv.id, " has ", seq.image_pos.size(), " image tokens for ",
                seq.n_images, " images");
  return seq;
}

}  // namespace trimkv::vision::demo
