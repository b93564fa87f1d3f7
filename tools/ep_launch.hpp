// The process model of `fusedmoe run --ep R` and `fusedmoe bench --op ep_layer --ep R`: one
// process per rank on one host. The parent checks the command line and the GPUs, makes the NCCL
// unique id (its bootstrap root lives in the parent until every rank has joined), starts R copies
// of this executable with the same arguments plus the hidden `--ep-child RANK,R,DEVICE,IDHEX`,
// and waits for them: a rank that fails, dies or outlives FMOE_EP_TIMEOUT is reported with its
// rank and status, and the others are ended a grace period later (they would wait in NCCL for
// the missing rank forever). Rank r binds GPU r.
#pragma once

#include <string>
#include <vector>

namespace fusedmoe::cli {

/// The hidden option a rank process gets (not in the usage): --ep-child RANK,R,DEVICE,IDHEX.
constexpr const char* kEpChildOption = "ep-child";

struct EpChild {
  int rank = 0, ranks = 1, device = 0;
  std::vector<unsigned char> id;  ///< the NCCL unique id's bytes (128)
};

/// Parses --ep-child's value; `ranks` is --ep's, which must agree. UsageError when malformed.
EpChild parse_ep_child(const std::string& text, int ranks);
std::string format_ep_child(const EpChild& c);

/// An error of rank `c`'s process, named for it: "fusedmoe: rank 1 (GPU 1): <what>".
std::string rank_message(const EpChild& c, const std::string& what);

/// Refuses R ranks on this machine unless it shows at least R usable sm_90 GPUs: an Error naming
/// both numbers, or the reason there is none (no driver, no device). Touches no GPU memory.
void require_gpus_for_ranks(int ranks);

/// Refuses --ep when this build has no NCCL (an Error saying how to build with it).
void require_nccl_build();

/// Starts R rank processes of this executable: `argv` (the command and its arguments, as the
/// user gave them) + --ep-child, with NCCL_NVLS_ENABLE=0 in their environment unless the user
/// set it. Waits for all; prints one line per rank that did not exit 0 (rank, exit status or
/// signal, or timeout) and returns 0 when every rank exited 0, else 1. `what` names the command
/// in messages ("run --ep").
int launch_ranks(const char* what, int ranks, const std::vector<std::string>& argv);
/// launch_ranks with another executable than this one (the launcher's tests start /bin/sh).
int launch_ranks_of(const char* what, const char* exe, int ranks,
                    const std::vector<std::string>& argv);

}  // namespace fusedmoe::cli
