#include "trimkv/vision/image.h"

#include <stb_image.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "trimkv/core/error.h"

namespace trimkv::vision {

namespace {

struct StbFree {
  void operator()(unsigned char* p) const { stbi_image_free(p); }
};

bool is_jpeg(const uint8_t* d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }

// JPEG markers: a restart (RSTn, inside entropy-coded data), one without a length (SOI, RSTn,
// TEM), and a start of frame (SOFn: C0-CF but DHT C4, JPG C8, DAC CC).
bool jpeg_restart(uint8_t m) { return m >= 0xD0 && m <= 0xD7; }
bool jpeg_standalone(uint8_t m) { return m == 0xD8 || jpeg_restart(m) || m == 0x01; }
bool jpeg_sof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

// stb_image decodes a JPEG whose entropy-coded data stops early without complaint (it pads with
// zeros); Pillow refuses it. A complete JPEG has an EOI marker (FF D9) after its first SOS
// segment: entropy-coded data escapes every FF byte, so FF D9 there is the real end marker.
bool jpeg_is_complete(const uint8_t* d, size_t n) {
  size_t p = 2;
  while (p + 4 <= n) {
    if (d[p] != 0xFF) return false;
    const uint8_t marker = d[p + 1];
    if (marker == 0xFF) { ++p; continue; }  // fill byte
    if (jpeg_standalone(marker)) { p += 2; continue; }
    const size_t len = (static_cast<size_t>(d[p + 2]) << 8) | d[p + 3];
    if (marker == 0xDA) {  // start of scan: the EOI must follow somewhere after it
      for (size_t q = p + 2 + len; q + 1 < n; ++q)
        if (d[q] == 0xFF && d[q + 1] == 0xD9) return true;
      return false;
    }
    p += 2 + len;
  }
  return false;
}

// stb_image decodes with tables a JPEG never defined (a scan naming a Huffman table no DHT gave,
// a frame naming a quantisation table no DQT gave) by reading its own uninitialised memory: the
// fuzzer found such files crashing it now and then. libjpeg refuses them, and so do we: the
// first table this walk finds used before it is defined, as text ("" when every one is).
std::string jpeg_undefined_table(const uint8_t* d, size_t n) {
  bool quant[4] = {}, huff[2][4] = {};
  std::vector<int> frame_tables;  // quantisation table of each frame component
  size_t p = 2;
  while (p + 4 <= n) {
    if (d[p] != 0xFF) return "";  // not a marker where one must be: left to the decoder
    const uint8_t marker = d[p + 1];
    if (marker == 0xFF) { ++p; continue; }
    if (jpeg_standalone(marker)) { p += 2; continue; }
    if (marker == 0xD9) break;
    const size_t len = (static_cast<size_t>(d[p + 2]) << 8) | d[p + 3];
    if (len < 2 || p + 2 + len > n) return "";
    const uint8_t* seg = d + p + 4;
    const size_t seg_len = len - 2;
    if (marker == 0xDB) {  // DQT: (precision, id) then 64 or 128 bytes, repeated
      for (size_t q = 0; q < seg_len;) {
        quant[seg[q] & 3] = true;
        q += 1 + 64 * ((seg[q] >> 4) ? 2 : 1);
      }
    } else if (marker == 0xC4) {  // DHT: (class, id), 16 counts, the values, repeated
      for (size_t q = 0; q + 17 <= seg_len;) {
        huff[(seg[q] >> 4) & 1][seg[q] & 3] = true;
        size_t count = 0;
        for (int i = 1; i <= 16; ++i) count += seg[q + i];
        q += 17 + count;
      }
    } else if (jpeg_sof(marker)) {
      frame_tables.clear();
      for (size_t c = 0; seg_len >= 6 && c < seg[5] && 6 + 3 * c + 2 < seg_len; ++c)
        frame_tables.push_back(seg[6 + 3 * c + 2] & 3);
    } else if (marker == 0xDA) {  // SOS: check the tables, then skip the entropy-coded data
      for (int t : frame_tables)
        if (!quant[t]) return "quantisation table " + std::to_string(t);
      const size_t ns = seg_len >= 1 ? seg[0] : 0;
      if (seg_len < 1 + 2 * ns + 3) return "";
      const int ss = seg[1 + 2 * ns], se = seg[2 + 2 * ns];
      for (size_t c = 0; c < ns; ++c) {
        const int td = (seg[2 + 2 * c] >> 4) & 3, ta = seg[2 + 2 * c] & 3;
        if (ss == 0 && !huff[0][td]) return "DC Huffman table " + std::to_string(td);
        if (se > 0 && !huff[1][ta]) return "AC Huffman table " + std::to_string(ta);
      }
      size_t q = p + 2 + len;
      while (q + 1 < n && !(d[q] == 0xFF && d[q + 1] != 0x00 && !jpeg_restart(d[q + 1]))) ++q;
      p = q;
      continue;
    }
    p += 2 + len;
  }
  return "";
}

// Pillow's alpha_composite of (r, a) over opaque white, channel by channel (AlphaComposite.c with
// dst = (255, 255, 255, 255), PRECISION_BITS = 7): bit-identical to transformers' convert_to_rgb.
uint8_t over_white(uint32_t c, uint32_t a) {
  if (a == 0) return 255;
  constexpr uint32_t kBits = 7;
  const uint32_t coef1 = a * 255 * 255 * (1u << kBits) / (255 * 255);
  const uint32_t coef2 = 255 * (1u << kBits) - coef1;
  const uint32_t tmp = c * coef1 + 255 * coef2 + (0x80u << kBits);
  return static_cast<uint8_t>(((((tmp >> 8) + tmp) >> 8)) >> kBits);
}

uint16_t rd16(const uint8_t* p, bool le) { return le ? p[0] | (p[1] << 8) : (p[0] << 8) | p[1]; }
uint32_t rd32(const uint8_t* p, bool le) {
  return le ? p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24)
            : (static_cast<uint32_t>(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
}

// Width and height declared by the file's header, read without stb_image (which refuses images
// above 2^30 bytes with a generic message): PNG IHDR, GIF logical screen, BMP info header, JPEG
// SOFn. False when the header is not one of these or is cut short.
bool header_size(const uint8_t* d, size_t n, int64_t& w, int64_t& h) {
  if (n >= 24 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) {
    w = rd32(d + 16, false);
    h = rd32(d + 20, false);
    return true;
  }
  if (n >= 10 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0)) {
    w = rd16(d + 6, true);
    h = rd16(d + 8, true);
    return true;
  }
  if (n >= 26 && d[0] == 'B' && d[1] == 'M') {
    w = static_cast<int32_t>(rd32(d + 18, true));
    h = static_cast<int32_t>(rd32(d + 22, true));
    if (h < 0) h = -h;  // top-down bitmap
    return true;
  }
  if (is_jpeg(d, n)) {
    size_t p = 2;
    while (p + 4 <= n && d[p] == 0xFF) {
      const uint8_t m = d[p + 1];
      const size_t len = (static_cast<size_t>(d[p + 2]) << 8) | d[p + 3];
      const bool sof = jpeg_sof(m);
      if (sof && p + 9 <= n) {
        h = rd16(d + p + 5, false);
        w = rd16(d + p + 7, false);
        return true;
      }
      if (m == 0xDA || len < 2) return false;
      p += 2 + len;
    }
  }
  return false;
}

}  // namespace

int jpeg_exif_orientation(const uint8_t* d, size_t n) {
  if (!is_jpeg(d, n)) return 1;
  size_t p = 2;
  while (p + 4 <= n && d[p] == 0xFF) {
    const uint8_t marker = d[p + 1];
    if (marker == 0xDA || marker == 0xD9) break;  // image data: no more metadata segments
    const size_t len = (static_cast<size_t>(d[p + 2]) << 8) | d[p + 3];
    if (len < 2 || p + 2 + len > n) break;
    const uint8_t* seg = d + p + 4;
    const size_t seg_len = len - 2;
    if (marker == 0xE1 && seg_len >= 14 && std::memcmp(seg, "Exif\0\0", 6) == 0) {
      const uint8_t* tiff = seg + 6;
      const size_t tiff_len = seg_len - 6;
      const bool le = tiff[0] == 'I' && tiff[1] == 'I';
      if (!le && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
      const size_t ifd = rd32(tiff + 4, le);  // size_t: an offset near 2^32 must not wrap past the check
      if (ifd + 2 > tiff_len) return 1;
      const uint16_t count = rd16(tiff + ifd, le);
      for (uint32_t i = 0; i < count; ++i) {
        const size_t e = ifd + 2 + 12 * static_cast<size_t>(i);
        if (e + 12 > tiff_len) return 1;
        if (rd16(tiff + e, le) == 0x0112 && rd16(tiff + e + 2, le) == 3) {
          const int v = rd16(tiff + e + 8, le);
          return v >= 1 && v <= 8 ? v : 1;
        }
      }
      return 1;
    }
    p += 2 + len;
  }
  return 1;
}

RgbImage apply_orientation(const RgbImage& in, int orientation) {
  if (orientation <= 1 || orientation > 8) return in;
  const int w = in.width, h = in.height;
  const bool swap = orientation >= 5;  // transposes and quarter turns swap the axes
  RgbImage out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.data.resize(in.data.size());
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // source pixel, as PIL's ImageOps.exif_transpose methods
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                      // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;      // ROTATE_180
        case 4: sy = h - 1 - y; break;                      // FLIP_TOP_BOTTOM
        case 5: sx = y; sy = x; break;                      // TRANSPOSE
        case 6: sx = y; sy = h - 1 - x; break;              // ROTATE_270
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;      // TRANSVERSE
        case 8: sx = w - 1 - y; sy = x; break;              // ROTATE_90
      }
      for (int c = 0; c < 3; ++c)
        out.data[(static_cast<size_t>(y) * out.width + x) * 3 + c] = in.at(sx, sy, c);
    }
  return out;
}

RgbImage decode_image_memory(const uint8_t* data, size_t size, const std::string& name,
                             const DecodeOptions& options) {
  TRIMKV_CHECK(size > 0, Input, "image '", name, "' is an empty file");
  TRIMKV_CHECK(size <= static_cast<size_t>(INT32_MAX), Input, "image '", name, "' is too large a file (",
               size, " bytes)");
  const int len = static_cast<int>(size);
  int64_t hw = 0, hh = 0;
  // Header sides reach 2^32 - 1 (PNG): compared by division, their product could overflow.
  if (header_size(data, size, hw, hh) && hw > 0 && hh > 0)
    TRIMKV_CHECK(hh <= options.max_pixels / hw, Input, "image '", name, "' is ", hw, "x", hh, " = ",
                 static_cast<double>(hw) * static_cast<double>(hh), " pixels, above the limit of ",
                 options.max_pixels, " pixels (refused before decoding)");
  int w = 0, h = 0, channels = 0;
  if (!stbi_info_from_memory(data, len, &w, &h, &channels))
    TRIMKV_FAIL(Input, "'", name, "' is not an image this program can read (PNG, JPEG, BMP, GIF): ",
                stbi_failure_reason() ? stbi_failure_reason() : "unknown format");
  TRIMKV_CHECK(w > 0 && h > 0, Input, "image '", name, "' declares an empty size ", w, "x", h);
  const int64_t pixels = static_cast<int64_t>(w) * h;
  TRIMKV_CHECK(pixels <= options.max_pixels, Input, "image '", name, "' is ", w, "x", h, " = ",
               pixels, " pixels, above the limit of ", options.max_pixels,
               " pixels (refused before decoding)");
  if (is_jpeg(data, size)) {
    TRIMKV_CHECK(jpeg_is_complete(data, size), Input, "image '", name,
                 "' is a truncated or corrupt JPEG (no end-of-image marker after its image data)");
    const std::string undefined = jpeg_undefined_table(data, size);
    TRIMKV_CHECK(undefined.empty(), Input, "image '", name, "' is a corrupt JPEG: it uses ", undefined,
                 ", which it never defines");
  }
  std::unique_ptr<unsigned char, StbFree> px(stbi_load_from_memory(data, len, &w, &h, &channels, 0));
  if (!px)
    TRIMKV_FAIL(Input, "cannot decode image '", name, "' (truncated or corrupt?): ",
                stbi_failure_reason() ? stbi_failure_reason() : "unknown error");
  RgbImage img;
  img.width = w;
  img.height = h;
  img.data.resize(static_cast<size_t>(pixels) * 3);
  const unsigned char* s = px.get();
  for (int64_t i = 0; i < pixels; ++i) {
    uint8_t* o = &img.data[i * 3];
    switch (channels) {
      case 1: o[0] = o[1] = o[2] = s[i]; break;
      case 2: o[0] = o[1] = o[2] = over_white(s[i * 2], s[i * 2 + 1]); break;
      case 3: o[0] = s[i * 3]; o[1] = s[i * 3 + 1]; o[2] = s[i * 3 + 2]; break;
      case 4:
        for (int c = 0; c < 3; ++c) o[c] = over_white(s[i * 4 + c], s[i * 4 + 3]);
        break;
      default: TRIMKV_FAIL(Unsupported, "image '", name, "' has ", channels, " channels");
    }
  }
  if (options.apply_exif_orientation) img = apply_orientation(img, jpeg_exif_orientation(data, size));
  return img;
}

RgbImage decode_image_file(const std::string& path, const DecodeOptions& options) {
  std::error_code ec;
  TRIMKV_CHECK(std::filesystem::exists(path, ec), Io, "image '", path, "' does not exist");
  TRIMKV_CHECK(std::filesystem::is_regular_file(path, ec), Input, "image '", path, "' is not a file");
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot open image '", path, "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return decode_image_memory(bytes.data(), bytes.size(), path, options);
}

}  // namespace trimkv::vision
