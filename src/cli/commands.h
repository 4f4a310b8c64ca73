// The subcommands of the pptrain executable; each lives in its own file under cli/.
// A command gets its arguments after the subcommand name and returns the exit code;
// user errors are thrown as pptrain::Error and reported by main().
#pragma once
#include <string>
#include <vector>

namespace pptrain {

class MpiSession;
using Args = std::vector<std::string>;

int cmd_train(const Args& args, MpiSession& mpi);
int cmd_profile(const Args& args, MpiSession& mpi);
int cmd_version(const Args& args);
int cmd_prepare_data(const Args& args);
int cmd_schedule(const Args& args);
int cmd_inspect(const Args& args);
int cmd_import_llmc(const Args& args);
int cmd_import_hf(const Args& args);
int cmd_export_hf(const Args& args);
int cmd_plan(const Args& args, MpiSession& mpi);

// How the planner's profile is taken for `cfg` (cli/profile.cpp): its layers timed on the
// first microbatch of data.train when that matches shards (partition/profile.h says why),
// else on uniform ids; `source` (optional) says which.
struct ProfileOptions;
struct Config;
ProfileOptions profile_options(const Config& cfg, std::string* source = nullptr);
// The options of a start-up measurement for plan_job (job/job_plan.h): profile_options when
// parallel.profile is `measure` (timed on the job's data); otherwise nothing is read.
ProfileOptions measure_options(const Config& cfg);

// What this binary's backends can run, for the defaults of a config (cli/version.cpp).
struct BuildFeatures;
BuildFeatures build_features();

}  // namespace pptrain
