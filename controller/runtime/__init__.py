"""Generic controller machinery: API client, informers, work queue, runner, leader election.

Modelled on client-go and controller-runtime, in asyncio with anyio task groups. Nothing in this
package knows about TFJobs; a controller is built by handing it a reconcile function.
"""
