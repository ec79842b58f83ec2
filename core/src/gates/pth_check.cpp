#include "gates/pth_check.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

#include "trimkv/core/error.h"

namespace trimkv {

namespace {

// Little-endian reads at `at`, checked against the buffer's end.
struct Bytes {
  const uint8_t* p;
  size_t n;
  const std::string& path;

  void need(uint64_t at, uint64_t len, const char* what) const {
    TRIMKV_CHECK(at <= n && len <= n - at, Format, "'", path, "' is not a torch.save file this program reads: ", what,
                 " runs past the end of the file (truncated or corrupt zip)");
  }
  uint64_t u(uint64_t at, int len, const char* what) const {
    need(at, static_cast<uint64_t>(len), what);
    uint64_t v = 0;
    for (int i = len - 1; i >= 0; --i) v = (v << 8) | p[at + static_cast<uint64_t>(i)];
    return v;
  }
};

struct Entry {
  std::string name;
  uint64_t data = 0, size = 0;
};

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  TRIMKV_FAIL(Format, "'", path, "' is not a torch.save file this program reads: ", why);
}

std::vector<Entry> zip_entries(const Bytes& b) {
  const std::string& path = b.path;
  constexpr uint64_t kEocd = 22;
  if (b.n < kEocd) refuse(path, "too short for a zip file");
  // The end-of-central-directory record: the last signature whose comment ends the file.
  uint64_t eocd = UINT64_MAX;
  for (uint64_t at = b.n - kEocd + 1; at-- > 0 && b.n - at <= kEocd + 0xFFFF;) {
    if (b.u(at, 4, "the end record") == 0x06054b50 && at + kEocd + b.u(at + 20, 2, "the end record") == b.n) {
      eocd = at;
      break;
    }
  }
  if (eocd == UINT64_MAX) refuse(path, "no zip end-of-directory record");
  if (b.u(eocd + 4, 2, "the end record") != 0 || b.u(eocd + 6, 2, "the end record") != 0)
    refuse(path, "a multi-disk zip");
  uint64_t count = b.u(eocd + 10, 2, "the end record"), cd_size = b.u(eocd + 12, 4, "the end record"),
           cd_at = b.u(eocd + 16, 4, "the end record");
  uint64_t cd_limit = eocd;  // the directory ends before the end records
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_at == 0xFFFFFFFF) {  // zip64: the locator, then the record
    if (eocd < 20 || b.u(eocd - 20, 4, "the zip64 locator") != 0x07064b50) refuse(path, "a zip64 end record without its locator");
    const uint64_t rec = b.u(eocd - 20 + 8, 8, "the zip64 locator");
    if (rec > eocd - 20 || b.u(rec, 4, "the zip64 end record") != 0x06064b50) refuse(path, "a zip64 locator pointing nowhere");
    count = b.u(rec + 32, 8, "the zip64 end record");
    cd_size = b.u(rec + 40, 8, "the zip64 end record");
    cd_at = b.u(rec + 48, 8, "the zip64 end record");
    cd_limit = rec;
  }
  if (cd_at > cd_limit || cd_size > cd_limit - cd_at) refuse(path, "its central directory lies outside the file");
  if (count > cd_size / 46) refuse(path, "more directory entries (" + std::to_string(count) + ") than the directory holds");
  std::vector<Entry> out;
  std::set<std::string> names;
  uint64_t at = cd_at;
  for (uint64_t k = 0; k < count; ++k) {
    if (at + 46 > cd_at + cd_size || b.u(at, 4, "a directory entry") != 0x02014b50)
      refuse(path, "directory entry " + std::to_string(k + 1) + " is malformed");
    const uint64_t flags = b.u(at + 8, 2, "a directory entry"), method = b.u(at + 10, 2, "a directory entry");
    uint64_t csize = b.u(at + 20, 4, "a directory entry"), usize = b.u(at + 24, 4, "a directory entry");
    const uint64_t name_len = b.u(at + 28, 2, "a directory entry"), extra_len = b.u(at + 30, 2, "a directory entry"),
                   comment_len = b.u(at + 32, 2, "a directory entry");
    uint64_t local = b.u(at + 42, 4, "a directory entry");
    const uint64_t end = at + 46 + name_len + extra_len + comment_len;
    if (end > cd_at + cd_size) refuse(path, "directory entry " + std::to_string(k + 1) + " runs past the directory");
    Entry e;
    e.name.assign(reinterpret_cast<const char*>(b.p + at + 46), name_len);
    if (e.name.empty() || e.name.find('\0') != std::string::npos) refuse(path, "an entry without a proper name");
    if (flags & 1) refuse(path, "entry '" + e.name + "' is encrypted");
    if (method != 0) refuse(path, "entry '" + e.name + "' is compressed (torch.save stores entries as they are)");
    // Zip64 sizes and offset, in this order, for the fields that say 0xFFFFFFFF.
    for (uint64_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = b.u(x, 2, "an extra field"), len = b.u(x + 2, 2, "an extra field");
      if (x + 4 + len > at + 46 + name_len + extra_len) refuse(path, "entry '" + e.name + "' has a malformed extra field");
      if (id == 1) {
        uint64_t y = x + 4;
        for (uint64_t* f : {&usize, &csize, &local}) {
          if (*f != 0xFFFFFFFF) continue;
          if (y + 8 > x + 4 + len) refuse(path, "entry '" + e.name + "' has a short zip64 field");
          *f = b.u(y, 8, "a zip64 field");
          y += 8;
        }
      }
      x += 4 + len;
    }
    if (csize != usize) refuse(path, "entry '" + e.name + "' has two sizes");
    if (local > cd_at || 30 > cd_at - local || b.u(local, 4, "a local header") != 0x04034b50)
      refuse(path, "entry '" + e.name + "' has no local header where the directory says");
    e.data = local + 30 + b.u(local + 26, 2, "a local header") + b.u(local + 28, 2, "a local header");
    e.size = usize;
    if (e.data > cd_at || e.size > cd_at - e.data) refuse(path, "entry '" + e.name + "' runs into the directory");
    if (!names.insert(e.name).second) refuse(path, "entry '" + e.name + "' appears twice");
    out.push_back(std::move(e));
    at = end;
  }
  return out;
}

// Walks the pickle: opcodes a state dict uses, arguments in bounds, memo and stack consistent.
void check_pickle(const uint8_t* p, size_t n, const std::string& path, const std::string& name) {
  auto bad = [&](const std::string& why, size_t at) {
    refuse(path, "'" + name + "' " + why + " at byte " + std::to_string(at));
  };
  std::vector<size_t> marks;  // stack depth at each MARK
  size_t depth = 0;
  std::set<uint64_t> memo;
  size_t i = 0;
  auto arg = [&](size_t len) {  // the argument's bytes start at i + 1
    if (len > n || i + 1 > n - len) bad("has an argument running past its end", i);
    return p + i + 1;
  };
  auto le = [&](const uint8_t* q, int len) {
    uint64_t v = 0;
    for (int k = len - 1; k >= 0; --k) v = (v << 8) | q[k];
    return v;
  };
  auto pop = [&](size_t k) {
    const size_t floor = marks.empty() ? 0 : marks.back();
    if (depth < floor + k) bad("pops more than its stack holds", i);
    depth -= k;
  };
  auto pop_mark = [&] {
    if (marks.empty()) bad("closes a MARK it never opened", i);
    depth = marks.back();
    marks.pop_back();
  };
  while (i < n) {
    const uint8_t op = p[i];
    size_t len = 0;  // argument bytes after the opcode
    switch (op) {
      case 0x80: len = 1; if (arg(1)[0] < 2 || arg(1)[0] > 4) bad("uses pickle protocol " + std::to_string(arg(1)[0]), i); break;  // PROTO
      case 0x95: len = 8; arg(8); break;                                          // FRAME
      case '.':                                                                   // STOP
        if (depth < 1 || !marks.empty()) bad("stops with nothing (or an open MARK) on its stack", i);
        return;
      case '(': marks.push_back(depth); break;                                    // MARK
      case '}': case ']': case ')': case 'N': case 0x88: case 0x89: ++depth; break;  // empty dict/list/tuple, None, bools
      case 'K': len = 1; arg(1); ++depth; break;                                  // BININT1
      case 'M': len = 2; arg(2); ++depth; break;                                  // BININT2
      case 'J': len = 4; arg(4); ++depth; break;                                  // BININT
      case 'G': len = 8; arg(8); ++depth; break;                                  // BINFLOAT
      case 0x8a: len = 1 + arg(1)[0]; arg(len); ++depth; break;                   // LONG1
      case 'X': case 'T': case 'B': len = 4 + le(arg(4), 4); arg(len); ++depth; break;   // BINUNICODE, BINSTRING, BINBYTES
      case 0x8c: case 'U': case 'C': len = 1 + arg(1)[0]; arg(len); ++depth; break;  // SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES
      case 'c': {                                                                 // GLOBAL: "module\nname\n"
        size_t lines = 0, k = i + 1;
        while (k < n && lines < 2) lines += p[k++] == '\n';
        if (lines < 2) bad("has an unterminated GLOBAL", i);
        len = k - i - 1;
        ++depth;
        break;
      }
      case 0x93: pop(2); ++depth; break;                                           // STACK_GLOBAL
      case 'q': len = 1; pop(1); ++depth; memo.insert(arg(1)[0]); break;          // BINPUT
      case 'r': len = 4; pop(1); ++depth; memo.insert(le(arg(4), 4)); break;      // LONG_BINPUT
      case 0x94: pop(1); ++depth; memo.insert(memo.size()); break;                // MEMOIZE
      case 'h': len = 1; if (!memo.count(arg(1)[0])) bad("reads a memo entry never stored", i); ++depth; break;  // BINGET
      case 'j': len = 4; if (!memo.count(le(arg(4), 4))) bad("reads a memo entry never stored", i); ++depth; break;  // LONG_BINGET
      case 't': pop_mark(); ++depth; break;                                        // TUPLE
      case 0x85: pop(1); ++depth; break;                                           // TUPLE1
      case 0x86: pop(2); ++depth; break;                                           // TUPLE2
      case 0x87: pop(3); ++depth; break;                                           // TUPLE3
      case 's': pop(3); ++depth; break;                                            // SETITEM
      case 'a': pop(2); ++depth; break;                                            // APPEND
      case 'u': case 'e': {                                                        // SETITEMS, APPENDS
        const size_t items = depth - (marks.empty() ? 0 : marks.back());
        pop_mark();
        if (op == 'u' && items % 2) bad("sets a dict item without its value", i);
        pop(1);
        ++depth;
        break;
      }
      case 'Q': pop(1); ++depth; break;                                            // BINPERSID
      case 'R': case 'b': case 0x81: pop(2); ++depth; break;                       // REDUCE, BUILD, NEWOBJ
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        bad(std::string("uses pickle opcode ") + hex + ", which no state dict needs", i);
      }
    }
    i += 1 + len;
  }
  refuse(path, "'" + name + "' ends without STOP");
}

}  // namespace

void check_torch_save_file(const std::vector<char>& bytes, const std::string& path) {
  const Bytes b{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path};
  const std::vector<Entry> entries = zip_entries(b);
  if (entries.empty()) refuse(path, "an empty zip");
  const std::string folder = entries.front().name.substr(0, entries.front().name.find('/') + 1);
  if (folder.empty() || folder.size() == entries.front().name.size()) refuse(path, "entries outside a top folder");
  const Entry* pickle = nullptr;
  for (const Entry& e : entries) {
    if (e.name.compare(0, folder.size(), folder) != 0) refuse(path, "entries under two top folders");
    if (e.name == folder + "data.pkl") pickle = &e;
  }
  if (!pickle) refuse(path, "no " + folder + "data.pkl");
  check_pickle(b.p + pickle->data, pickle->size, path, pickle->name);
}

}  // namespace trimkv
