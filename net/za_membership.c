/*  za_membership.c: the newest members of an elastic job, shared between a
    task's broker client and its role (za_membership.h).                   */
#include "za/za_membership.h"

#include <stdio.h>
#include <string.h>

void
za_membership_init (za_membership_t *self)
{
    memset (&self->now, 0, sizeof self->now);
    pthread_mutex_init (&self->mutex, NULL);
    atomic_store (&self->number, 0);
    atomic_store (&self->count, 0);
}

void
za_membership_destroy (za_membership_t *self)
{
    pthread_mutex_destroy (&self->mutex);
}

void
za_membership_set (za_membership_t *self, const za_members_t *members)
{
    pthread_mutex_lock (&self->mutex);
    if (members->number > self->now.number) {
        self->now = *members;
        atomic_store (&self->count, members->count);
        atomic_store (&self->number, members->number);
    }
    pthread_mutex_unlock (&self->mutex);
}

int64_t
za_membership_number (za_membership_t *self)
{
    return atomic_load_explicit (&self->number, memory_order_acquire);
}

int
za_membership_count (za_membership_t *self)
{
    return atomic_load_explicit (&self->count, memory_order_acquire);
}

void
za_membership_get (za_membership_t *self, za_members_t *members)
{
    pthread_mutex_lock (&self->mutex);
    *members = self->now;
    pthread_mutex_unlock (&self->mutex);
}

int
za_members_rank (const za_members_t *members, int index)
{
    for (int r = 0; r < members->count; r++)
        if (members->index [r] == index)
            return r;
    return -1;
}

void
za_members_text (const za_members_t *members, char *text, size_t size)
{
    size_t used = 0;
    text [0] = 0;
    for (int r = 0; r < members->count && used < size; r++) {
        int n = members->index [r] == 0
              ? snprintf (text + used, size - used, "%schief", r? ", ": "")
              : snprintf (text + used, size - used, "%sworker %d", r? ", ": "",
                          members->index [r] - 1);
        used += n > 0? (size_t) n: 0;
    }
}
