// Logging: the only global state in pptrain. Messages go to stderr prefixed with the
// rank when the job has more than one; `info` prints on rank 0 only.
#pragma once
#include <string>

#include "core/error.h"

namespace pptrain::log {

void set_rank(int rank, int world);  // called once after MPI init
int rank();
void set_quiet(bool quiet);          // tests silence info output

void info_line(const std::string& s);   // rank 0 only
void warn_line(const std::string& s);   // every rank
void error_line(const std::string& s);  // every rank

template <typename... A> void info(const A&... a) { info_line(cat(a...)); }
template <typename... A> void warn(const A&... a) { warn_line(cat(a...)); }
template <typename... A> void error(const A&... a) { error_line(cat(a...)); }

}  // namespace pptrain::log
