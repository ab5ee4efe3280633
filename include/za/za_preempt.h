/*  za_preempt.h: preemption as schedulers announce it: Slurm's
    `--signal=TERM@60`, Kubernetes' termination grace, a spot instance's
    notice all send SIGTERM. A process that handles it (one-process
    training, an all-reduce rank, the evaluator, the broker, the --local
    launcher) takes SIGTERM as a request: its job writes a checkpoint at a
    step every trainer agrees on and exits with --requeue-exit-code ("run me
    again"); the next start resumes there. SIGTERM to a process that does
    not handle it interrupts as Ctrl-C does; SIGKILL after the scheduler's
    grace stops a process that takes too long. The flags
    here are the request; runtime/ installs the signal handler that sets
    them (CZMQ's own handler would take SIGTERM as an interrupt).          */
#ifndef ZA_PREEMPT_H_INCLUDED
#define ZA_PREEMPT_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

//  The default --requeue-exit-code: sysexits.h's EX_TEMPFAIL ("a temporary
//  failure; the user is invited to retry"). Also what a role's actor
//  reports when it stopped for preemption.
#define ZA_EXIT_REQUEUE 75

//  How long a supervisor (the broker, the --local launcher) waits for its
//  preempted tasks to save and exit before it kills them.
#define ZA_PREEMPT_GRACE_SECS 120.0

//  Whether this process takes SIGTERM as a preemption request (set by what
//  it runs) or as an interrupt (the default).
void za_preempt_set_handled (int handled);
int za_preempt_handled (void);

//  Asks this process to stop for preemption (the signal handler does, and a
//  process that hears of its job's preemption from a peer). Async-signal-safe.
void za_preempt_request (void);

//  1 once preemption was asked for.
int za_preempt_requested (void);

//  An elastic job's worker (--workers MIN:MAX) takes SIGTERM as leaving the
//  job instead, as a node leaves a torchrun job: it tells the broker, which
//  drops it from the members when it holds an elastic slot (the others go
//  on, their ring re-formed without it, and it exits 0) or else stops the
//  whole job for preemption as above (its view says `preempting`). Set by
//  what runs such a worker; leave_requested is 1 once SIGTERM came so.
void za_preempt_set_leaves (int leaves);
int za_preempt_leaves (void);
void za_preempt_leave (void);
int za_preempt_leave_requested (void);

#ifdef __cplusplus
}
#endif
#endif
