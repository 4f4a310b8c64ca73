// Every repository path the Markdown files name resolves inside the repository: Markdown
// links ](path) and ](path#anchor) (relative to the file that holds them) and the paths
// written in the text or in `code` that start with one of the repository's top folders
// (src/, tests/, docs/, configs/, scripts/, slurm/, kernels/, bench/, mk/), relative to
// the root. A renamed
// file or a moved folder then fails here instead of leaving a newcomer at a dead end.
// Globs and placeholders (*, {}, <>, $) are not paths; build/, runs/ and data/ are made by
// the build and the runs, so they are not checked.
//
// The Markdown files are README.md and every *.md under docs/ (a page added there is
// checked without naming it here), of the repository root: PPTRAIN_SRC_DIR's parent when
// set, else the working directory (tests run from the root).
//
// README.md also stays short (ReadmeStaysShort): it is a newcomer's first page, what
// pptrain is, the two commands and a short tour, and points into docs/ for the rest.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace fs = std::filesystem;
using pptrain::testing::read_file;
using pptrain::testing::TempDir;
using pptrain::testing::write_file;

namespace {

fs::path repo_root() {
  if (const char* src = std::getenv("PPTRAIN_SRC_DIR")) return fs::path(src).parent_path();
  return fs::current_path();
}

// The paths `markdown` (the text of `file`, under `root`) names that do not exist.
std::vector<std::string> dead_paths(const fs::path& root, const fs::path& file, const std::string& markdown) {
  static const std::regex link(R"(\]\(([^)#\s]+)(?:#[^)\s]*)?\))");  // the anchor dropped
  static const std::regex named(R"((?:^|[^\w/.-])((?:src|tests|docs|configs|scripts|slurm|kernels|bench|mk)/[\w./-]+))");
  std::set<std::string> dead;
  auto check = [&](std::string path, const fs::path& base) {
    while (!path.empty() && std::string(".,:;)").find(path.back()) != std::string::npos) path.pop_back();
    if (path.empty() || path.find("://") != std::string::npos || path.rfind("mailto:", 0) == 0) return;
    if (path.find_first_of("*{}<>$") != std::string::npos) return;
    for (const char* made : {"build/", "runs/", "data/"})
      if (path.rfind(made, 0) == 0) return;
    const fs::path resolved = (base / path).lexically_normal();
    const std::string rel = resolved.lexically_relative(root).string();
    if (rel.empty() || rel.rfind("..", 0) == 0 || !fs::exists(resolved)) dead.insert(path);
  };
  for (std::sregex_iterator it(markdown.begin(), markdown.end(), link), end; it != end; ++it)
    check((*it)[1], file.parent_path());
  for (std::sregex_iterator it(markdown.begin(), markdown.end(), named), end; it != end; ++it) check((*it)[1], root);
  return {dead.begin(), dead.end()};
}

std::vector<fs::path> markdown_files(const fs::path& root) {
  std::vector<fs::path> files = {root / "README.md"};
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(root / "docs", ec))
    if (e.path().extension() == ".md") files.push_back(e.path());
  return files;
}

}  // namespace

TEST(DocsPaths, EveryPathTheMarkdownNamesExists) {
  const fs::path root = repo_root();
  const std::vector<fs::path> files = markdown_files(root);
  ASSERT_TRUE(fs::exists(root / "README.md")) << root;
  ASSERT_GE(files.size(), 2u) << "no docs/*.md under " << root;
  for (const fs::path& f : files)
    for (const std::string& dead : dead_paths(root, f, read_file(f.string())))
      ADD_FAILURE() << f.lexically_relative(root).string() << ": names '" << dead << "', which does not exist";
}

// A newcomer reads README.md first and whole, so it holds what pptrain is, the two
// commands, the tour and the pointers into docs/; the rest (every measured figure, the
// operations, the key reference) lives in docs/*.md. 250 lines keeps it readable in one
// sitting; a README that grows past it should move its new detail into a docs/ page.
TEST(DocsPaths, ReadmeStaysShort) {
  constexpr int kMaxReadmeLines = 250;
  std::ifstream in((repo_root() / "README.md").string());
  ASSERT_TRUE(in) << "no README.md under " << repo_root();
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_LE(lines, kMaxReadmeLines) << "README.md has " << lines << " lines; move detail into docs/";
}

// The check bites: a dead link, a moved source file and a path out of the repository are
// found; URLs, in-page anchors, globs, placeholders and build outputs are left alone.
TEST(DocsPaths, DeadLinksAndMovedFilesAreFound) {
  TempDir dir;
  const fs::path root = dir.path();
  fs::create_directories(root / "docs");
  fs::create_directories(root / "src/core");
  write_file((root / "src/core/config.h").string(), "");
  write_file((root / "docs/GUIDE.md").string(), "");
  const std::string text =
      "See [the guide](docs/GUIDE.md#top), [gone](docs/GONE.md), [up](../outside.md), `src/core/config.h`,\n"
      "src/core/moved.cpp and (src/core/config.h). Not paths: https://example.org/src/x, `configs/*.yaml`,\n"
      "`build/pptrain`, `runs/ck/latest`, `src/<folder>/`.\n";
  EXPECT_EQ(dead_paths(root, root / "README.md", text),
            (std::vector<std::string>{"../outside.md", "docs/GONE.md", "src/core/moved.cpp"}));

  // A page under docs/: its links resolve from docs/ (a sibling page, the README above it),
  // its paths in the text from the root; a dead sibling link, one with an anchor and a
  // link out of the repository are found.
  write_file((root / "README.md").string(), "");
  const std::string page =
      "See [the guide](GUIDE.md), [the readme](../README.md#top), [gone](GONE.md),\n"
      "[out](../../outside.md), [a part](LOST2.md#part), docs/GUIDE.md and `src/core/config.h`;\n"
      "docs/LOST.md is gone.\n";
  EXPECT_EQ(dead_paths(root, root / "docs/PAGE.md", page),
            (std::vector<std::string>{"../../outside.md", "GONE.md", "LOST2.md", "docs/LOST.md"}));

  // Every page under docs/ is found, nested ones too.
  fs::create_directories(root / "docs/deep");
  write_file((root / "docs/deep/NESTED.md").string(), "");
  std::vector<fs::path> files = markdown_files(root);
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<fs::path>{root / "README.md", root / "docs/GUIDE.md", root / "docs/deep/NESTED.md"}));
}
