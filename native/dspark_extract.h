// Content properties read from free text with their `x-extract` patterns (RE2): tests/oracle/extract.py
// in C++, for one text at a time, so that a caller without Python (the JVM) gets the same columns, value for
// value and message for message. RE2 (release 2023-03-01, fetched by native/build_native.py) is compiled with the options
// pyarrow and google-re2 use (UTF-8; `.` matching newlines comes from the "(?s)" the pattern starts with).
// Internal to the core (not part of its C ABI); nothing here throws but std::bad_alloc.
#ifndef DSPARK_EXTRACT_H
#define DSPARK_EXTRACT_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dspark_match.h"

namespace re2 {
class RE2;
}

namespace dspark {

enum class ContentKind : uint8_t { STRING, INTEGER, NUMBER, BOOLEAN, ARRAY, JSON };
enum class ExtractMode : uint8_t { FIRST, LAST, ALL, COUNT };

// One content property of a plan. `pattern` is the profile's Extractor.source (the `x-extract` pattern after
// "(?s)"); without `has_extract` the property is null for every text.
struct ContentPropertySpec {
  std::string name;
  ContentKind kind = ContentKind::STRING;
  ContentKind item_kind = ContentKind::STRING;  // ARRAY: the items' kind (string, integer, number, boolean)
  bool has_extract = false;
  std::string pattern;
  ExtractMode mode = ExtractMode::FIRST;
};

// One property's value for one text: null, a string (also a JSON-kind value's compact text), an int64, a
// double, a boolean, or (ARRAY) a list of scalars. A string is `str`: a view into the text, or into `json`
// (a JSON-kind value's compact text, made here); valid while the text is and the value is not copied.
struct ExtractedValue {
  enum Tag : uint8_t { NONE, STR, INT, DBL, BOOL, LIST } tag = NONE;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string_view str;
  std::string json;
  std::vector<ExtractedValue> items;
};

// The properties' patterns, compiled once; `extract` may be called from several threads at once.
class TextExtractor {
 public:
  // A property's pattern, compiled once.
  struct Pattern {
    std::unique_ptr<re2::RE2> re;         // null for a property without a pattern
    std::unique_ptr<LiteralStart> start;  // where its matches start, without RE2's reverse DFA
    std::unique_ptr<LazyEnd> lazy;        // where they end, without a DFA over `.*?`
    std::unique_ptr<GroupBounds> bounds;  // where its value group lies, without RE2's backtracker
    int first_of = -1;  // the first property with the same pattern but for its groups (maybe this one)
  };

  // Compiles every pattern; on failure `ok()` is false and `error()` says which property and why. The
  // combinations a profile refuses (count on a non-integer, all on a scalar, an array without all, an
  // array of arrays) are refused here too.
  explicit TextExtractor(std::vector<ContentPropertySpec> properties);
  ~TextExtractor();
  TextExtractor(const TextExtractor&) = delete;
  TextExtractor& operator=(const TextExtractor&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::vector<ContentPropertySpec>& properties() const { return properties_; }

  // extract.py's extract for one text (valid UTF-8): one value per property, in order, and true with
  // `content_error` ("property 'name': reason", the first property that failed) when there is one.
  bool extract(std::string_view text, std::vector<ExtractedValue>& values, std::string& content_error) const;

 private:
  std::vector<ContentPropertySpec> properties_;
  std::vector<Pattern> patterns_;
  std::string error_;
};

// The first `n` code points of a UTF-8 text (extract.py's messages quote `text[:40]`).
std::string_view first_code_points(std::string_view s, size_t n);

}  // namespace dspark

#endif
