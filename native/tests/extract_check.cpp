// What dspark_extract gives, for tests/test_native_extract.py to hold against tests/oracle/extract.py.
// stdin: JSON lines {"properties": [{"name", "kind", "item_kind"?, "extract"?: {"pattern", "mode"}}], "text"};
// stdout, a JSON line each: {"values": [...], "error": str|null} (a json-kind value is its text, a number has
// a "." or an "e" so that it reads back as a float), or {"plan_error": str}.
// With --usable, stdin: JSON lines {"pattern"} (as the extractor gets it, "(?s)" first); stdout: a JSON line
// each, {"group": whether GroupBounds places its group 1, "literal": LiteralStart's literal, "lazy": whether
// LazyEnd applies} (dspark_match.h).
#include <charconv>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "dspark_extract.h"
#include "dspark_match.h"
#include "dspark_json.h"
#include "re2/re2.h"
#include "simdjson.h"

namespace {

using dspark::ContentKind;
using dspark::ExtractedValue;
using dspark::ExtractMode;

void put_value(std::string& out, const ExtractedValue& v) {
  switch (v.tag) {
    case ExtractedValue::NONE: out.append("null"); break;
    case ExtractedValue::STR: dspark_exact::write_string(out, v.str); break;
    case ExtractedValue::INT: out.append(std::to_string(v.i)); break;
    case ExtractedValue::BOOL: out.append(v.b ? "true" : "false"); break;
    case ExtractedValue::DBL: {
      char buf[64];
      auto r = std::to_chars(buf, buf + sizeof buf, v.d);
      std::string_view t(buf, static_cast<size_t>(r.ptr - buf));
      out.append(t);
      if (t.find_first_of(".e") == std::string_view::npos) out.append(".0");
      break;
    }
    case ExtractedValue::LIST:
      out.push_back('[');
      for (size_t k = 0; k < v.items.size(); ++k) {
        if (k) out.push_back(',');
        put_value(out, v.items[k]);
      }
      out.push_back(']');
      break;
  }
}

ContentKind kind_of(std::string_view name) {
  if (name == "integer") return ContentKind::INTEGER;
  if (name == "number") return ContentKind::NUMBER;
  if (name == "boolean") return ContentKind::BOOLEAN;
  if (name == "array") return ContentKind::ARRAY;
  if (name == "json") return ContentKind::JSON;
  return ContentKind::STRING;
}

ExtractMode mode_of(std::string_view name) {
  if (name == "last") return ExtractMode::LAST;
  if (name == "all") return ExtractMode::ALL;
  if (name == "count") return ExtractMode::COUNT;
  return ExtractMode::FIRST;
}

std::vector<dspark::ContentPropertySpec> specs(simdjson::dom::array properties) {
  std::vector<dspark::ContentPropertySpec> out;
  for (simdjson::dom::object p : properties) {
    dspark::ContentPropertySpec spec;
    spec.name = std::string(std::string_view(p["name"]));
    spec.kind = kind_of(std::string_view(p["kind"]));
    std::string_view item_kind;
    if (!p["item_kind"].get(item_kind)) spec.item_kind = kind_of(item_kind);
    simdjson::dom::object extract;
    if (!p["extract"].get(extract)) {
      spec.has_extract = true;
      spec.pattern = std::string(std::string_view(extract["pattern"]));
      spec.mode = mode_of(std::string_view(extract["mode"]));
    }
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace

int usable() {
  simdjson::dom::parser parser;
  std::string line;
  re2::RE2::Options options;
  options.set_log_errors(false);
  while (std::getline(std::cin, line)) {
    re2::RE2 re(std::string(std::string_view(parser.parse(line)["pattern"])), options);
    std::string out = "{\"group\":";
    out.append(re.ok() && dspark::GroupBounds(re, 1).usable() ? "true" : "false");
    out.append(",\"literal\":");
    dspark_exact::write_string(out, re.ok() ? dspark::LiteralStart(re).literal() : "");
    out.append(",\"lazy\":");
    out.append(re.ok() && dspark::LazyEnd(re).usable() ? "true" : "false");
    std::cout << out << "}\n";
  }
  return 0;
}

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc > 1 && std::string_view(argv[1]) == "--usable") return usable();
  simdjson::dom::parser parser;
  std::string line, plan, out;
  std::unique_ptr<dspark::TextExtractor> extractor;
  std::vector<ExtractedValue> values;
  std::string error;
  while (std::getline(std::cin, line)) {
    simdjson::dom::element doc = parser.parse(line);
    simdjson::dom::array properties = doc["properties"];
    std::string this_plan = simdjson::minify(properties);
    if (!extractor || this_plan != plan) {  // patterns compiled once per plan, as a caller would
      extractor = std::make_unique<dspark::TextExtractor>(specs(properties));
      plan = this_plan;
    }
    out.clear();
    if (!extractor->ok()) {
      out.append("{\"plan_error\":");
      dspark_exact::write_string(out, extractor->error());
    } else {
      bool failed = extractor->extract(std::string_view(doc["text"]), values, error);
      out.append("{\"values\":[");
      for (size_t k = 0; k < values.size(); ++k) {
        if (k) out.push_back(',');
        put_value(out, values[k]);
      }
      out.append("],\"error\":");
      if (failed)
        dspark_exact::write_string(out, error);
      else
        out.append("null");
    }
    out.append("}\n");
    std::cout << out;
  }
  return 0;
}
