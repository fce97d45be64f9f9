// DocsNamesTest.cpp — the front-page docs name what the library registers. The lists come from the registries as the
// tools see them (jit::registerBuiltins: schedules, target families and their archs, program kinds) and from the
// runtime's declared lists (head dims, element types); each test prints its list, then checks the docs:
//   README.md, before its first section: every schedule, every family's arch and every module kind (forward,
//     backward); anywhere: every family's name; one line that names the head dims lists every supported head dim
//     and pair and every element type;
//   CONTRIBUTING.md's folder map (the table under "## Folder map"): every schedule, every family and every program
//     kind;
//   docs/architecture.md: all of the above, with the head dims in one line as in README.md.
// A name counts where it stands as a word (`fa2`, fa2's; not fa20 or sm_90ab). TheCheckCatchesAnOmission shows the
// check failing on the docs with one name taken out.
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Runtime.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/Target/TargetFamily.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

using namespace flashtile;

namespace {

std::string readDoc(const std::string &relative) {
  std::ifstream in(std::filesystem::path(FLASHTILE_SOURCE_DIR) / relative);
  EXPECT_TRUE(in.good()) << relative << " cannot be read";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The text of `doc` from the line `heading` (empty: the start) to the next line that starts a section ("## ").
std::string section(const std::string &doc, std::string_view heading) {
  size_t begin = 0;
  if (!heading.empty()) {
    begin = doc.find("\n" + std::string(heading) + "\n");
    EXPECT_NE(begin, std::string::npos) << "no section " << heading;
    if (begin == std::string::npos)
      return "";
    begin += heading.size() + 2;
  }
  const size_t end = doc.find("\n## ", begin);
  return doc.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

bool isWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// Whether `word` stands in `text` with no letter, digit or underscore on either side.
bool hasWord(std::string_view text, std::string_view word) {
  for (size_t at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
    const bool before = at > 0 && isWordChar(text[at - 1]);
    const bool after = at + word.size() < text.size() && isWordChar(text[at + word.size()]);
    if (!before && !after)
      return true;
  }
  return false;
}

/// The names of `names` that `text` lacks as words.
std::vector<std::string> missingWords(std::string_view text, const std::vector<std::string> &names) {
  std::vector<std::string> missing;
  for (const std::string &name : names)
    if (!hasWord(text, name))
      missing.push_back(name);
  return missing;
}

/// What the line of `text` that names the head dims ("head dims", any case) and comes closest to listing `words` lacks
/// of them; every word when no line names the head dims.
std::vector<std::string> missingFromHeadDimLine(const std::string &text, const std::vector<std::string> &words) {
  std::vector<std::string> best = words;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("head dims") == std::string::npos)
      continue;
    std::vector<std::string> missing = missingWords(line, words);
    if (missing.size() < best.size())
      best = missing;
  }
  return best;
}

/// The docs as the checks read them.
struct Docs {
  std::string readme = readDoc("README.md");
  std::string readmeOpening = section(readme, "");
  std::string contributingMap = section(readDoc("CONTRIBUTING.md"), "## Folder map");
  std::string architecture = readDoc("docs/architecture.md");
};

const Docs &docs() {
  static const Docs instance;
  return instance;
}

std::vector<std::string> familyArchs() {
  std::vector<std::string> archs;
  for (const std::string &name : target::targetNames())
    for (const target::ArchLimits &limits : target::lookupTarget(name)->archs())
      if (std::find(archs.begin(), archs.end(), limits.arch) == archs.end())
        archs.emplace_back(limits.arch);
  return archs;
}

/// Every supported head dim, the pairs as "192/128", and the element types.
std::vector<std::string> headDimsAndDtypes() {
  std::vector<std::string> words;
  for (int headDim : kSupportedHeadDims)
    words.push_back(std::to_string(headDim));
  for (auto [headDim, headDimV] : kSupportedHeadDimPairs)
    words.push_back(std::to_string(headDim) + "/" + std::to_string(headDimV));
  for (std::string_view dtype : kSupportedDtypes)
    words.emplace_back(dtype);
  return words;
}

TEST(DocsNames, EverySchedule) {
  const std::vector<std::string> schedules = schedule::scheduleNames();
  std::printf("schedules: %s\n", tile::joinNames(schedules).c_str());
  ASSERT_FALSE(schedules.empty());
  EXPECT_EQ(tile::joinNames(missingWords(docs().readmeOpening, schedules)), "") << "README.md's opening lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().contributingMap, schedules)), "") << "CONTRIBUTING.md's folder map lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().architecture, schedules)), "") << "docs/architecture.md lacks them";
}

TEST(DocsNames, EveryTargetFamilyAndItsArchs) {
  const std::vector<std::string> families = target::targetNames(), archs = familyArchs();
  for (const std::string &family : families) {
    std::vector<std::string> its;
    for (const target::ArchLimits &limits : target::lookupTarget(family)->archs())
      its.emplace_back(limits.arch);
    std::printf("target family %s: %s\n", family.c_str(), tile::joinNames(its).c_str());
  }
  ASSERT_FALSE(families.empty());
  EXPECT_EQ(tile::joinNames(missingWords(docs().readme, families)), "") << "README.md lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().readmeOpening, archs)), "") << "README.md's opening lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().contributingMap, families)), "") << "CONTRIBUTING.md's folder map lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().architecture, families)), "") << "docs/architecture.md lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().architecture, archs)), "") << "docs/architecture.md lacks them";
}

TEST(DocsNames, EveryProgramKind) {
  const std::vector<std::string> kinds = tile::programKindNames(), modules = tile::moduleKindNames();
  std::printf("program kinds: %s\nmodule kinds: %s\n", tile::joinNames(kinds).c_str(), tile::joinNames(modules).c_str());
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(tile::joinNames(missingWords(docs().readmeOpening, modules)), "") << "README.md's opening lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().contributingMap, kinds)), "") << "CONTRIBUTING.md's folder map lacks them";
  EXPECT_EQ(tile::joinNames(missingWords(docs().architecture, kinds)), "") << "docs/architecture.md lacks them";
}

TEST(DocsNames, EveryHeadDimAndElementType) {
  const std::vector<std::string> words = headDimsAndDtypes();
  std::printf("head dims and element types: %s\n", tile::joinNames(words).c_str());
  EXPECT_EQ(tile::joinNames(missingFromHeadDimLine(docs().readme, words)), "")
      << "README.md has no line naming the head dims that lists them";
  EXPECT_EQ(tile::joinNames(missingFromHeadDimLine(docs().architecture, words)), "")
      << "docs/architecture.md has no line naming the head dims that lists them";
}

/// `text` with every word `word` (as hasWord finds it) replaced by `by`.
std::string withoutWord(const std::string &text, std::string_view word, std::string_view by) {
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(word); at != std::string::npos;) {
    const bool before = at > 0 && isWordChar(text[at - 1]);
    const bool after = at + word.size() < text.size() && isWordChar(text[at + word.size()]);
    if (before || after) {
      at = text.find(word, at + 1);
      continue;
    }
    out.append(text, from, at - from);
    out += by;
    from = at + word.size();
    at = text.find(word, from);
  }
  out.append(text, from);
  return out;
}

// The checks above on the docs with one registered name taken out: each reports that name and nothing else.
TEST(DocsNames, TheCheckCatchesAnOmission) {
  const std::vector<std::string> schedules = schedule::scheduleNames();
  ASSERT_FALSE(schedules.empty());
  const std::string last = schedules.back();
  EXPECT_EQ(missingWords(withoutWord(docs().architecture, last, "a schedule"), schedules),
            std::vector<std::string>{last});
  EXPECT_EQ(missingWords(withoutWord(docs().contributingMap, "sm100", "smX"), target::targetNames()),
            std::vector<std::string>{"sm100"});
  const std::vector<std::string> words = headDimsAndDtypes();
  EXPECT_EQ(missingFromHeadDimLine(withoutWord(docs().readme, "96", "ninety-six"), words),
            std::vector<std::string>{"96"});
  EXPECT_TRUE(hasWord("fa2's kernels", "fa2"));
  EXPECT_FALSE(hasWord("fa20 and sm_90ab", "fa2"));
  EXPECT_FALSE(hasWord("fa20 and sm_90ab", "sm_90a"));
}

} // namespace
