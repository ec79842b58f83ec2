// Reading the haystack corpus (data/haystack/corpus.jsonl).
#include <fstream>
#include <set>

#include "trimkv/core/error.h"
#include "trimkv/core/json_input.h"
#include "trimkv/core/long_context_tasks.h"

namespace trimkv::tasks {

std::vector<HaystackDocument> read_haystack_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot open the haystack corpus '", path, "'");
  std::vector<HaystackDocument> docs;
  std::set<std::string> ids;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const nlohmann::json j = parse_json_input(line, where);
    TRIMKV_CHECK(j.is_object(), Format, where, ": not a JSON object");
    HaystackDocument d;
    for (auto [key, field] : {std::pair{"id", &d.id}, {"kind", &d.kind}, {"split", &d.split}, {"text", &d.text}}) {
      TRIMKV_CHECK(j.contains(key) && j.at(key).is_string(), Format, where, ": field '", key,
                   "' missing or not a string");
      *field = j.at(key).get<std::string>();
    }
    TRIMKV_CHECK(d.split == "train" || d.split == "test", Format, where, ": split must be 'train' or 'test', got '",
                 d.split, "'");
    TRIMKV_CHECK(!d.text.empty(), Format, where, ": document '", d.id, "' has no text");
    TRIMKV_CHECK(ids.insert(d.id).second, Format, where, ": document id '", d.id, "' appears twice");
    docs.push_back(std::move(d));
  }
  TRIMKV_CHECK(!in.bad(), Io, path, ": read error");
  TRIMKV_CHECK(!docs.empty(), Format, path, ": no documents");
  return docs;
}

}  // namespace trimkv::tasks
