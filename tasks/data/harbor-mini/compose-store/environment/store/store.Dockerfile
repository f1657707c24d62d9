FROM orchard/base:bookworm
ARG PORT=8080
COPY store.py /srv/store.py
EXPOSE ${PORT}
CMD ["python3", "/srv/store.py"]
