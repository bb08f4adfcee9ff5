"""Label Studio review: server lifecycle, labeling configs, tasks, push, and pulls parsed into typed records
for the review owner (`builder.reviews`), which records decisions and computes agreement."""
