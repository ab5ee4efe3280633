/*  za_preempt.c: the process's preemption request (za_preempt.h).        */
#include "za/za_preempt.h"

#include <signal.h>

static volatile sig_atomic_t s_handled;
static volatile sig_atomic_t s_requested;
static volatile sig_atomic_t s_leaves;
static volatile sig_atomic_t s_leave_requested;

void
za_preempt_set_handled (int handled)
{
    s_handled = handled? 1: 0;
}

int
za_preempt_handled (void)
{
    return s_handled;
}

void
za_preempt_request (void)
{
    s_requested = 1;
}

int
za_preempt_requested (void)
{
    return s_requested;
}

void
za_preempt_set_leaves (int leaves)
{
    s_leaves = leaves? 1: 0;
}

int
za_preempt_leaves (void)
{
    return s_leaves;
}

void
za_preempt_leave (void)
{
    s_leave_requested = 1;
}

int
za_preempt_leave_requested (void)
{
    return s_leave_requested;
}
