#include "families/qwen_vl_encoder.h"

#include <ATen/ATen.h>

#include "trimkv/core/error.h"
#include "trimkv/core/policies.h"
#include "trimkv/vision/image.h"
#include "trimkv/vision/mrope.h"

namespace trimkv::vision {

std::pair<std::vector<TokenInfo>, std::vector<RopeOffset>> qwen_vl_tag_tokens(
    const std::vector<int32_t>& ids, const QwenVlTokenIds& tok, const std::vector<QwenVlImageGrid>& grids,
    int first_image_id) {
  std::vector<TokenInfo> infos(ids.size());
  MropePositions pos;
  size_t image = 0;     // images whose pads have been seen
  int64_t pending = 0;  // text tokens not yet added to `pos`
  for (size_t i = 0; i < ids.size();) {
    const int32_t id = ids[i];
    if (id == tok.image_pad) {
      TRIMKV_CHECK(image < grids.size(), Internal, "the prompt holds more image-pad runs than its ", grids.size(),
                   " image(s)");
      const QwenVlImageGrid& g = grids[image];
      const size_t n = static_cast<size_t>(g.rows * g.cols);
      TRIMKV_CHECK(i + n <= ids.size(), Internal, "image ", image, "'s pad run at ", i, " is shorter than its ",
                   g.rows, "x", g.cols, " grid");
      const auto image_id = static_cast<int16_t>(first_image_id + static_cast<int>(image));
      for (size_t k = 0; k < n; ++k) {
        TRIMKV_CHECK(ids[i + k] == tok.image_pad, Internal, "image ", image, "'s pad run at ", i, " holds ", k,
                     " pads, its grid needs ", n);
        TokenInfo& t = infos[i + k];
        t.modality = Modality::Image;
        t.image_id = image_id;
        t.patch_row = static_cast<int16_t>(static_cast<int64_t>(k) / g.cols);
        t.patch_col = static_cast<int16_t>(static_cast<int64_t>(k) % g.cols);
      }
      TRIMKV_CHECK(i + n == ids.size() || ids[i + n] != tok.image_pad, Internal, "image ", image,
                   "'s pad run at ", i, " is longer than its ", g.rows, "x", g.cols, " grid");
      pos.add_text(pending);
      pending = 0;
      pos.add_image(1, g.rows, g.cols, 1);
      ++image;
      i += n;
      continue;
    }
    if (id == tok.vision_start || id == tok.vision_end) {
      infos[i].modality = Modality::Special;  // text for the rotary (get_rope_index)
      // The image the marker opens (the next one) or closes (the last one).
      const size_t k = id == tok.vision_start ? image : image - 1;
      if (k < grids.size() && (id == tok.vision_start || image > 0))
        infos[i].image_id = static_cast<int16_t>(first_image_id + static_cast<int>(k));
    }
    ++pending;
    ++i;
  }
  TRIMKV_CHECK(image == grids.size(), Internal, "the prompt holds ", image, " image-pad run(s) for ", grids.size(),
               " image(s)");
  pos.add_text(pending);
  std::vector<RopeOffset> rope(ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    rope[i] = {static_cast<int32_t>(pos.time()[i]), static_cast<int32_t>(pos.row()[i]),
               static_cast<int32_t>(pos.col()[i])};
  return {std::move(infos), std::move(rope)};
}

namespace {

class QwenVlEncoder final : public TextTurnEncoder {
 public:
  QwenVlEncoder(std::string dir, std::shared_ptr<Tokenizer> tok, LoadedChatFormat format, std::vector<TemplateVar> vars,
                std::shared_ptr<const QwenVisionTower> tower, Qwen2VlProcessorConfig proc, QwenVlTokenIds ids)
      : TextTurnEncoder(std::move(dir), std::move(tok), std::move(format), std::move(vars)),
        m_tower(std::move(tower)), m_proc(proc), m_ids(ids) {}

  StreamSegment user_turn(const std::vector<Message>& history, const std::vector<ContentPart>& content,
                          int first_image_id, std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                          const ImageTokenReducer& reduce) const override {
    TRIMKV_CHECK(!content.empty(), Input, "an empty user message");
    check_no_image_markers(content, {kQwenImagePad, kQwenVisionStart, kQwenVisionEnd});
    return encode_content(format().user_text(history, content), content, first_image_id, images, cancel, reduce,
                          false);
  }
  StreamSegment raw_prompt(const std::vector<ContentPart>& content, int first_image_id,
                           std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                           const ImageTokenReducer& reduce) const override {
    check_no_image_markers(content, {kQwenImagePad, kQwenVisionStart, kQwenVisionEnd});
    std::string text;
    for (const ContentPart& part : content)
      text += part.kind == ContentPart::Kind::Text
                  ? part.text
                  : std::string(kQwenVisionStart) + kQwenImagePad + kQwenVisionEnd;
    return encode_content(text, content, first_image_id, images, cancel, reduce, true);
  }
  int64_t image_token_count(int width, int height) const override {
    TRIMKV_CHECK(width > 0 && height > 0, Input, "empty image");
    const auto [h, w] = m_proc.do_resize
                            ? qwen2_vl_smart_resize(height, width, m_proc.factor(), m_proc.min_pixels, m_proc.max_pixels)
                            : std::pair<int, int>{height, width};
    const int64_t f = m_proc.factor();
    return (static_cast<int64_t>(h) / f) * (static_cast<int64_t>(w) / f);
  }

 protected:
  std::shared_ptr<TextTurnEncoder> clone() const override { return std::make_shared<QwenVlEncoder>(*this); }

 private:
  struct EncodedImage {
    Qwen2VlPatches patches;
    QwenVlImageGrid grid;
    QwenVisionTower::Encoded out;
  };

  // `text` holds one <|image_pad|> per image part of `content`, in order; each becomes its
  // image's pads. Raw prompts keep the tokenizer's special tokens; template text adds none.
  StreamSegment encode_content(const std::string& text, const std::vector<ContentPart>& content,
                               int first_image_id, std::vector<ImageRecord>& images, const std::atomic<bool>* cancel,
                               const ImageTokenReducer& reduce, bool raw) const {
    const int64_t m = m_proc.merge_size;
    std::vector<EncodedImage> encoded;
    std::vector<QwenVlImageGrid> grids;
    std::vector<std::string> pads;
    std::vector<ImageRecord> records;
    for (const ContentPart& part : content) {
      if (part.kind == ContentPart::Kind::Text) continue;
      if (cancel && cancel->load()) TRIMKV_FAIL(Cancelled, "image encoding cancelled");
      EncodedImage e;
      try {
        e.patches = qwen2_vl_preprocess(decode_image_file(part.path), m_proc);
      } catch (const Error& err) {
        if (err.kind() != ErrorKind::Input) throw;
        TRIMKV_FAIL(Input, "image '", part.path, "': ", err.what());
      }
      e.grid = {e.patches.grid_h / m, e.patches.grid_w / m};
      ImageRecord r;
      r.image_id = static_cast<int16_t>(first_image_id + static_cast<int>(records.size()));
      r.source = part.path;
      r.width = e.patches.width;
      r.height = e.patches.height;
      r.resized_width = e.patches.resized_width;
      r.resized_height = e.patches.resized_height;
      r.n_tiles = 1;
      r.tile_size = 0;  // not tiled: one grid over the resized image
      r.grid_rows = static_cast<int>(e.grid.rows);
      r.grid_cols = static_cast<int>(e.grid.cols);
      r.grid_side = static_cast<int>(std::max(e.grid.rows, e.grid.cols));
      r.n_image_tokens = e.grid.rows * e.grid.cols;
      std::string run;
      run.reserve(static_cast<size_t>(r.n_image_tokens) * 13);
      for (int64_t k = 0; k < r.n_image_tokens; ++k) run += kQwenImagePad;
      pads.push_back(std::move(run));
      grids.push_back(e.grid);
      records.push_back(r);
      encoded.push_back(std::move(e));
    }
    const std::string expanded = expand_image_placeholders(
        text, pads, raw ? "the prompt" : "the chat template of '" + model_dir() + "'", kQwenImagePad);
    StreamSegment seg;
    seg.ids = raw ? tokenizer().encode(expanded) : encode(expanded);
    std::tie(seg.infos, seg.rope) = qwen_vl_tag_tokens(seg.ids, m_ids, grids, first_image_id);
    std::vector<at::Tensor> feats;
    std::vector<std::vector<at::Tensor>> deep(m_tower->config().deepstack_visual_indexes.size());
    for (EncodedImage& e : encoded) {
      e.out = m_tower->encode(e.patches.pixels, e.patches.grid_h, e.patches.grid_w, static_cast<bool>(reduce), cancel);
      feats.push_back(e.out.embeddings);
      for (size_t j = 0; j < deep.size(); ++j) deep[j].push_back(e.out.deepstack[j]);
    }
    if (!feats.empty()) {
      seg.image_embeddings = at::cat(feats, 0);
      for (const auto& d : deep) seg.deepstack.push_back(at::cat(d, 0));
    }
    if (reduce && !encoded.empty()) reduce_image_tokens(seg, encoded, records, first_image_id, reduce);
    images.insert(images.end(), records.begin(), records.end());
    return seg;
  }

  // VisionZip after the merger: each image's merged tokens (last-block attention and keys pooled
  // over their merge block) go through `reduce`; the image's pad run becomes the kept tokens: the
  // dominant ones in order with their own tags and rotary offsets, then the merged contextual
  // ones (grid row/column -1; rotary offsets of the token that seeded them); deepstack rows are
  // reduced the same way. The text after keeps
  // its offsets: the image still spans its grid. An image whose reduction keeps everything stays
  // as it was, no merge recorded.
  void reduce_image_tokens(StreamSegment& seg, const std::vector<EncodedImage>& encoded,
                           std::vector<ImageRecord>& records, int first_image_id,
                           const ImageTokenReducer& reduce) const {
    std::vector<int32_t> ids;
    std::vector<TokenInfo> infos;
    std::vector<RopeOffset> rope;
    std::vector<at::Tensor> rows;
    std::vector<std::vector<at::Tensor>> deep(seg.deepstack.size());  // deepstack rows follow
    for (size_t i = 0; i < seg.ids.size();) {
      if (seg.infos[i].modality != Modality::Image) {
        ids.push_back(seg.ids[i]);
        infos.push_back(seg.infos[i]);
        rope.push_back(seg.rope[i]);
        ++i;
        continue;
      }
      const int k = seg.infos[i].image_id - first_image_id;
      const EncodedImage& e = encoded[static_cast<size_t>(k)];
      const int64_t n = e.grid.rows * e.grid.cols;
      const VisionZipResult r = reduce(e.out.attention, e.out.keys, e.out.embeddings);
      if (r.embeddings.size(0) >= n) {
        ids.insert(ids.end(), seg.ids.begin() + i, seg.ids.begin() + i + n);
        infos.insert(infos.end(), seg.infos.begin() + i, seg.infos.begin() + i + n);
        rope.insert(rope.end(), seg.rope.begin() + i, seg.rope.begin() + i + n);
        rows.push_back(e.out.embeddings);
        for (size_t j = 0; j < deep.size(); ++j) deep[j].push_back(e.out.deepstack[j]);
      } else {
        TokenMerge tm;
        tm.image_id = seg.infos[i].image_id;
        tm.first_token = static_cast<int32_t>(ids.size());
        tm.n_in = static_cast<int32_t>(n);
        tm.n_out = static_cast<int32_t>(r.embeddings.size(0));
        tm.dominant = r.dominant;
        tm.assignment = r.assignment;
        for (int32_t d : r.dominant) {
          ids.push_back(m_ids.image_pad);
          infos.push_back(seg.infos[i + static_cast<size_t>(d)]);
          rope.push_back(seg.rope[i + static_cast<size_t>(d)]);
        }
        for (int32_t seed : r.contextual_seed) {
          TokenInfo t = seg.infos[i];
          t.patch_row = t.patch_col = -1;
          ids.push_back(m_ids.image_pad);
          infos.push_back(t);
          rope.push_back(seg.rope[i + static_cast<size_t>(seed)]);
        }
        TRIMKV_ASSERT(static_cast<int64_t>(ids.size()) - tm.first_token == tm.n_out);
        seg.token_merges.push_back(std::move(tm));
        rows.push_back(r.embeddings);
        for (size_t j = 0; j < deep.size(); ++j) deep[j].push_back(visionzip_reduce_rows(r, e.out.deepstack[j]));
      }
      records[static_cast<size_t>(k)].n_image_tokens = rows.back().size(0);
      i += static_cast<size_t>(n);
    }
    seg.ids = std::move(ids);
    seg.infos = std::move(infos);
    seg.rope = std::move(rope);
    seg.image_embeddings = at::cat(rows, 0);
    for (size_t j = 0; j < deep.size(); ++j) seg.deepstack[j] = at::cat(deep[j], 0);
  }

  std::shared_ptr<const QwenVisionTower> m_tower;
  Qwen2VlProcessorConfig m_proc;
  QwenVlTokenIds m_ids;
};

}  // namespace

std::shared_ptr<const TurnEncoder> make_qwen_vl_encoder(std::string dir, std::shared_ptr<Tokenizer> tokenizer,
                                                        LoadedChatFormat format, std::vector<TemplateVar> vars,
                                                        std::shared_ptr<const QwenVisionTower> tower,
                                                        Qwen2VlProcessorConfig processor, QwenVlTokenIds ids) {
  return std::make_shared<QwenVlEncoder>(std::move(dir), std::move(tokenizer), std::move(format), std::move(vars),
                                         std::move(tower), processor, ids);
}

}  // namespace trimkv::vision
