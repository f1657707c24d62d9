"""The live-web family: WebVoyager, Online-Mind2Web and DeepShop tasks from the users' own data
files, on the live web (`--network full`), judged by a vision model (`orchard judge`)."""
